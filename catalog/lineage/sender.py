"""Sending outbox events: in this process, or in a child process that owns the HTTP work.

Serialising events and talking HTTP costs about a millisecond of Python per event; done on a
thread of the server it competes with writers for the GIL. ``ChildSender`` moves that work to
a child process (``python -m catalog.lineage.sender_child``) that reads the OpenLineage
configuration the same way (same environment, same working directory) and answers each event
with one line: ``ok``, ``rej`` (the collector refused it: retrying cannot help), ``err``
(transient: collector down, timeout) or ``skip`` (not tried after an ``err`` in the same batch).

Frames on the child's stdin: ``<n>\\n`` then ``n`` lines of compact JSON (no newlines inside).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from catalog.lineage.transport import to_client_event

logger = logging.getLogger("icefloe.lineage.sender")

OK, REJECTED, TRANSIENT, SKIPPED = "ok", "rej", "err", "skip"


def is_rejection(exc: BaseException) -> bool:
    """True when the collector refused the event itself (retrying the same bytes cannot help)."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)


def emit_all(client: Any, bodies: Sequence[bytes]) -> list[tuple[str, str]]:
    """Emit in order; stop trying after the first transient failure."""
    results: list[tuple[str, str]] = []
    failing = False
    for body in bodies:
        if failing:
            results.append((SKIPPED, ""))
            continue
        try:
            client.emit(to_client_event(json.loads(body)))
        except Exception as exc:
            if is_rejection(exc):
                results.append((REJECTED, type(exc).__name__))
            else:
                failing = True
                results.append((TRANSIENT, type(exc).__name__))
        else:
            results.append((OK, ""))
    return results


class InProcessSender:
    """Emits on the calling thread through an OpenLineage client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def send(self, bodies: Sequence[bytes]) -> list[tuple[str, str]]:
        return emit_all(self.client, bodies)

    def close(self) -> None:
        try:
            self.client.close(timeout=1.0)
        except Exception:
            logger.debug("closing the OpenLineage client failed", exc_info=True)


class ChildSender:
    """Emits in a child process; restarts it when it dies or stops answering.

    Args:
        per_event_timeout_s: How long one event may take before the child is presumed stuck.
    """

    def __init__(self, per_event_timeout_s: float = 10.0) -> None:
        self.per_event_timeout_s = per_event_timeout_s
        # The child must see the configuration the exporter was started with, even if this
        # process's environment changes later.
        self._env = dict(os.environ)
        self._env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._cwd = os.getcwd()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self.cpu_s = 0.0  # CPU time of child processes that have ended

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "catalog.lineage.sender_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
        )
        self._buffer = b""
        return self._proc

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None  # the child exited
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def send(self, bodies: Sequence[bytes]) -> list[tuple[str, str]]:
        proc = self._ensure()
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"%d\n" % len(bodies) + b"".join(b.replace(b"\n", b" ") + b"\n" for b in bodies))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            return [(TRANSIENT, "sender process gone")] + [(SKIPPED, "")] * (len(bodies) - 1)
        results: list[tuple[str, str]] = []
        deadline = time.monotonic() + self.per_event_timeout_s * max(1, len(bodies))
        for _ in bodies:
            line = self._read_line(proc, deadline)
            if line is None:
                logger.warning("lineage sender process stopped answering; restarting it")
                self._kill()
                break
            status, _, detail = line.decode("utf-8", "replace").partition(" ")
            results.append((status, detail))
        if len(results) < len(bodies):
            results += [(TRANSIENT, "sender process gone")] + [(SKIPPED, "")] * (len(bodies) - len(results) - 1)
        return results

    def interrupt(self) -> None:
        """Kill the child from another thread (a ``send`` waiting on it then returns)."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                proc.kill()
            except OSError:
                pass

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for an ended child and add its CPU time to ``cpu_s``."""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s += usage.ru_utime + usage.ru_stime

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
                self._reap(self._proc)
            self._proc = None

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    self.cpu_s += usage.ru_utime + usage.ru_stime
                    break
                time.sleep(0.02)
            else:
                self._kill()
        except ChildProcessError:
            pass  # already reaped
        except Exception:
            self._kill()
        self._proc = None
