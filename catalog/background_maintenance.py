"""``BackgroundMaintainer``: the server thread that runs ``catalog.maintenance`` by itself.

It compacts tables that received many small files, and expires a table's snapshots only after
it committed (an idle table commits nothing; periods from ``ICEFLOE_EXPIRY_PERIOD_S`` /
``ICEFLOE_SWEEP_PERIOD_S``), sweeps orphans, drops idempotency keys past their retention and
trims the commit log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from catalog.maintenance import (
    AUTO_PROPERTY,
    DEFAULT_MIN_INPUT_FILES,
    DEFAULT_ORPHAN_GRACE_S,
    MIN_INPUT_FILES_PROPERTY,
    compact,
    expire_snapshots,
    prop_int,
    remove_orphans,
)
from catalog.maintenance_worker import MaintenanceWorker
from catalog.object_store import storage_failure

if TYPE_CHECKING:
    from catalog.append import Appender

logger = logging.getLogger("icefloe.catalog.maintenance")

EXPIRY_PERIOD_S = 30.0
SWEEP_PERIOD_S = DEFAULT_ORPHAN_GRACE_S / 4
# Environment overrides of the two periods (seconds), read when a maintainer starts: tests
# (and operators who want faster or slower background work) set them without code changes.
EXPIRY_PERIOD_ENV = "ICEFLOE_EXPIRY_PERIOD_S"
SWEEP_PERIOD_ENV = "ICEFLOE_SWEEP_PERIOD_S"


def seconds_from_env(env: str, default: float) -> float:
    """``env`` as a positive number of seconds; ``default`` when unset or not such a number
    (logged: a typo must not stop the server, and background work must not spin)."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        logger.warning("%s=%r is not a positive number of seconds; using %g", env, raw, default)
        return default
    return value


class BackgroundMaintainer:
    """Server thread: compacts tables that received many small files; periodically expires
    snapshots of the tables it has seen written, sweeps their orphans, drops idempotency
    keys past their retention and trims the commit log to its retention."""

    def __init__(
        self,
        appender: Appender,
        stopping: threading.Event,
        interval_s: float = 1.0,
        worker: MaintenanceWorker | None = None,
    ) -> None:
        self._appender = appender
        # Compaction's file and manifest work runs in a worker process, off the server's GIL.
        self.worker = worker if worker is not None else MaintenanceWorker()
        self._stopping = stopping
        self._stop = threading.Event()
        self._interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._new_files: dict[tuple[str, ...], int] = {}  # small files since the last compaction
        self._last_expiry: dict[tuple[str, ...], float] = {}
        self._last_sweep: dict[tuple[str, ...], float] = {}
        # The metadata location each table had right after its last expiry check: unchanged
        # means nobody committed since, and the table is left alone (see ``_expire_if_written``).
        self._expiry_checked_at: dict[tuple[str, ...], str] = {}
        self._last_key_expiry = time.monotonic()
        self.expiry_period_s = seconds_from_env(EXPIRY_PERIOD_ENV, EXPIRY_PERIOD_S)
        self.sweep_period_s = seconds_from_env(SWEEP_PERIOD_ENV, SWEEP_PERIOD_S)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="icefloe-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # First: a compaction running in the worker is abandoned (nothing of it is committed)
        # rather than waited for.
        self.worker.close()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _stopped(self) -> bool:
        return self._stop.is_set() or self._stopping.is_set()

    def _run(self) -> None:
        while not (self._stop.wait(self._interval_s) or self._stopping.is_set()):
            for identifier, files in self._appender.take_dirty().items():
                self._new_files[identifier] = self._new_files.get(identifier, 0) + files
            for identifier in list(self._new_files):
                if self._stopped():
                    return
                try:
                    self._maintain_one(identifier)
                except Exception as exc:
                    if self._stopped():
                        return  # the worker was stopped under it
                    failure = storage_failure(exc)
                    if failure is not None:  # the object store is down: retried next round, no traceback
                        logger.warning("background maintenance of %s failed: %s", ".".join(identifier), failure)
                    else:
                        logger.warning("background maintenance of %s failed", ".".join(identifier), exc_info=True)
            if time.monotonic() - self._last_key_expiry > self.sweep_period_s:
                self._last_key_expiry = time.monotonic()
                try:
                    self._appender.idempotency.expire()
                    self._appender.staging.expire_committed(retention_s=self._appender.idempotency.retention_s)
                except Exception:
                    logger.warning("idempotency key expiry failed", exc_info=True)
                try:
                    # Commit-log retention (never past a hold such as the lineage cursor).
                    self._appender.catalog.trim_commit_log()
                except Exception:
                    logger.warning("commit-log trim failed", exc_info=True)

    def _maintain_one(self, identifier: tuple[str, ...]) -> None:
        catalog = self._appender.catalog
        if not catalog.table_exists(identifier):
            self._forget(identifier)
            return
        table = catalog.load_table(identifier)
        if table.properties.get(AUTO_PROPERTY, "true").lower() == "false":
            self._forget(identifier)
            return
        now = time.monotonic()
        threshold = prop_int(table, MIN_INPUT_FILES_PROPERTY, DEFAULT_MIN_INPUT_FILES)
        if self._new_files.get(identifier, 0) >= threshold:
            compact(self._appender, identifier, worker=self.worker)
            self._new_files[identifier] = 0
        if now - self._last_expiry.get(identifier, 0.0) > self.expiry_period_s:
            self._last_expiry[identifier] = now
            self._expire_if_written(identifier, table.metadata_location)
        if now - self._last_sweep.get(identifier, now) > self.sweep_period_s:
            self._last_sweep[identifier] = now
            remove_orphans(self._appender, identifier, worker=self.worker)
        self._last_sweep.setdefault(identifier, now)

    def _expire_if_written(self, identifier: tuple[str, ...], location: str) -> None:
        """Time-based expiry, only for a table that committed since its last check.

        Snapshots age past the retention window one by one: expiring whatever had aged out at
        each period made a table nobody wrote commit ``expire`` every period for a whole
        window after its last write (20 commits over 10 minutes by default), and feed
        subscribers and the watch page saw commits no one made. Now a table is expired at most
        once after each burst of commits (theirs, or a compaction's); what is still inside the
        window then waits for the table's next commit (the commit path caps the count at
        ``icefloe.snapshots.retain``) or for ``icefloe maintain``. An idle table commits nothing.
        """
        if self._expiry_checked_at.get(identifier) == location:
            return
        expire_snapshots(self._appender, identifier)
        # Our own expire commit moved the location: remember the one after it. A commit landing
        # in between is taken as seen; its snapshots wait for the next commit, as above.
        self._expiry_checked_at[identifier] = self._appender.catalog.load_table(identifier).metadata_location

    def _forget(self, identifier: tuple[str, ...]) -> None:
        for state in (self._new_files, self._last_expiry, self._last_sweep, self._expiry_checked_at):
            state.pop(identifier, None)
