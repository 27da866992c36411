"""The primary's read workers: started, watched, restarted, and handed out to endpoints.

``ReadWorkerPool`` starts N ``python -m flight_server.workers`` processes without waiting for
them (the primary is serving meanwhile; until a worker is ready its share of reads stays in
the primary). A worker is in the rotation from its ``READY`` line until its process exits;
one that exits (``kill -9``, a crash) is started again after a back-off that doubles from
0.5 s to 30 s while it keeps failing (a worker that ran a minute counts as healthy again).
Each worker's stdin is a pipe only the primary holds: when the primary dies, the pipe
closes and the worker stops (see ``read_worker``), so no worker outlives it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import pyarrow.flight as flight

from flight_server.config import Config
from flight_server.workers.read_worker import READY_PREFIX, config_to_json

logger = logging.getLogger("icefloe.workers")

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# A worker that ran this long before it exited is restarted at once (its failures are forgotten).
HEALTHY_AFTER_S = 60.0
_WATCH_INTERVAL_S = 0.1
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclasses.dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    location: flight.Location | None = None  # set while the worker is ready; None: out of rotation
    started: float = 0.0
    failures: int = 0
    restart_at: float = 0.0


def advertised_host(config: Config) -> str:
    """The host name clients reach the workers by: the server's own host, or on a wildcard
    address the first ``--advertise-uri``'s host (else this machine's name)."""
    if config.host not in _WILDCARD_HOSTS:
        return config.host
    for uri in config.advertise_uris:
        host = urlparse(uri).hostname
        if host:
            return host
    return socket.getfqdn()


class ReadWorkerPool:
    """N read-worker processes of this server and the round-robin over the ready ones."""

    def __init__(self, config: Config, count: int) -> None:
        self.count = count
        self._host = advertised_host(config)
        # A worker serves the primary's warehouse with its security, on a port of its own,
        # and nothing else of the primary (HTTP, ingest, demo data, workers of its own).
        worker = dataclasses.replace(config, port=0, read_workers=0, rest_port=None, metrics_port=None,
                                     ingest_config=None, demo=False)
        self._config_line = (config_to_json(worker) + "\n").encode()
        self._slots = [_Slot(i) for i in range(count)]
        self._lock = threading.Lock()
        self._turn = 0
        self._closing = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="icefloe-read-workers", daemon=True)

    # -- rotation ------------------------------------------------------------------------

    def next_location(self) -> flight.Location | None:
        """The next ready worker's location, round robin; None when none is ready."""
        with self._lock:
            for _ in range(len(self._slots)):
                slot = self._slots[self._turn % len(self._slots)]
                self._turn += 1
                if slot.location is not None and slot.proc is not None and slot.proc.poll() is None:
                    return slot.location
        return None

    def ready_locations(self) -> list[str]:
        """URIs of the workers in the rotation now."""
        with self._lock:
            return [slot.location.uri.decode() for slot in self._slots if slot.location is not None]

    def pids(self) -> list[int]:
        with self._lock:
            return [slot.proc.pid for slot in self._slots if slot.proc is not None]

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker and the watcher; returns at once (workers join when ready)."""
        with self._lock:
            for slot in self._slots:
                self._spawn(slot)
        self._watcher.start()

    def _spawn(self, slot: _Slot) -> None:
        """Start the process of ``slot`` (under the lock)."""
        env = dict(os.environ)
        # The worker imports this very code base, wherever the primary found it.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen([sys.executable, "-m", "flight_server.workers", str(slot.index)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, close_fds=True)
        assert proc.stdin is not None
        proc.stdin.write(self._config_line)
        proc.stdin.flush()  # stdin stays open: it is the worker's lifeline
        slot.proc, slot.location, slot.started = proc, None, time.monotonic()
        threading.Thread(target=self._await_ready, args=(slot, proc), name=f"icefloe-read-worker-{slot.index}",
                         daemon=True).start()
        logger.info("read worker %d starting (pid %d)", slot.index, proc.pid)

    def _await_ready(self, slot: _Slot, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not line.startswith(READY_PREFIX):
                continue
            uri = urlparse(line.removeprefix(READY_PREFIX))
            location = flight.Location(f"{uri.scheme}://{self._host}:{uri.port}")
            with self._lock:
                if slot.proc is proc and proc.poll() is None:
                    slot.location = location
            logger.info("read worker %d ready on %s", slot.index, location.uri.decode())
        proc.stdout.close()  # end of file: the worker exited (the watcher sees it)

    def _watch(self) -> None:
        while not self._closing.wait(_WATCH_INTERVAL_S):
            now = time.monotonic()
            with self._lock:
                for slot in self._slots:
                    if slot.proc is not None and slot.proc.poll() is not None:
                        self._lost(slot, now)
                    elif slot.proc is None and now >= slot.restart_at and not self._closing.is_set():
                        self._spawn(slot)

    def _lost(self, slot: _Slot, now: float) -> None:
        """A worker exited: out of the rotation, and a restart after the back-off (under the lock)."""
        assert slot.proc is not None
        code = slot.proc.returncode
        if now - slot.started >= HEALTHY_AFTER_S:
            slot.failures = 0
        delay = min(FIRST_BACKOFF_S * 2 ** slot.failures, MAX_BACKOFF_S)
        slot.failures += 1
        logger.warning("read worker %d (pid %d) exited with %s; restarting in %.1f s", slot.index, slot.proc.pid,
                       code, delay)
        _close_lifeline(slot.proc)
        slot.proc, slot.location, slot.restart_at = None, None, now + delay

    def reload_users(self) -> None:
        """Pass SIGHUP on: every worker re-reads the users file, as the primary does."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGHUP)
            except ProcessLookupError:
                pass

    def close(self, grace_s: float = 5.0) -> None:
        """Stop every worker (closing its lifeline, then SIGTERM, then SIGKILL) and wait for it."""
        self._closing.set()
        if self._watcher.is_alive():
            self._watcher.join()
        with self._lock:
            procs = [slot.proc for slot in self._slots if slot.proc is not None]
            for slot in self._slots:
                slot.proc, slot.location = None, None
        for proc in procs:
            _close_lifeline(proc)
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("read worker pid %d did not stop within %.0f s; killing it", proc.pid, grace_s)
                proc.kill()
                proc.wait()


def _close_lifeline(proc: subprocess.Popen[bytes]) -> None:
    """Close the worker's stdin: a live worker stops when it reads the end of file."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass  # the worker is gone already (a broken pipe on flush)
