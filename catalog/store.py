"""Thin wrapper over rocksdict: one process writes, any number read.

The writer opens the database exclusively (RocksDB's LOCK file). Readers in other processes
open it as a RocksDB *secondary* instance and catch up with the primary's WAL before each read,
so a CLI or a pyiceberg user sees the server's latest commits without taking the lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import cast

import rocksdict

from catalog import keys

logger = logging.getLogger("icefloe.catalog.store")


class StoreLockedError(RuntimeError):
    """The database is held by another process for writing."""


class StoreSnapshot:
    """The database as it was when ``RocksStore.snapshot`` was called."""

    def __init__(self, snapshot: rocksdict.Snapshot) -> None:
        self._snapshot = snapshot

    def get(self, key: bytes) -> bytes | None:
        # Only item access reads at the snapshot (rocksdict's snapshot iterators read the
        # latest data); a missing key is a bare Exception saying so.
        try:
            value: bytes = self._snapshot[key]
        except Exception as exc:
            if "not found" in str(exc).lower():
                return None
            raise
        return value


class RocksStore:
    """Key/value access to the catalog database with durable (fsync'd) atomic batches."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._secondary_dir: str | None = None
        self._catch_up_lock = threading.Lock()
        # When the last finished catch-up began (monotonic), and the threads inside
        # ``caught_up`` (their reads skip the catch-up: one per block is enough).
        self._caught_up_from = float("-inf")
        self._local = threading.local()
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(not read_only)
        if read_only:
            if not os.path.exists(os.path.join(path, "CURRENT")):
                raise FileNotFoundError(f"no icefloe catalog at {path}")
            options.set_max_open_files(-1)
            self._secondary_dir = tempfile.mkdtemp(prefix="icefloe-ro-")
            self._db = rocksdict.Rdict(
                path, options, access_type=rocksdict.AccessType.secondary(self._secondary_dir)
            )
        else:
            os.makedirs(path, exist_ok=True)
            try:
                self._db = rocksdict.Rdict(path, options)
            except Exception as exc:  # rocksdict raises a bare Exception for a held LOCK
                if "lock" in str(exc).lower():
                    raise StoreLockedError(f"catalog database is in use by another process: {path}") from exc
                raise
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self.closed = False  # set by close(): readiness checks read it, never a closed handle

    # -- reads -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Catch a read-only (secondary) instance up with the writer's latest commits."""
        if self._secondary_dir is not None and not getattr(self._local, "caught_up", False):
            self._catch_up_after(time.monotonic())

    def _catch_up_after(self, since: float) -> None:
        """Catch up, unless a catch-up that began at or after ``since`` has finished meanwhile
        (threads arriving together share one: it sees every commit made before they came)."""
        with self._catch_up_lock:
            if self._caught_up_from >= since:
                return
            started = time.monotonic()
            self._db.try_catch_up_with_primary()
            self._caught_up_from = started

    @contextlib.contextmanager
    def caught_up(self) -> Iterator[None]:
        """One catch-up now; reads in the block (on this thread) skip their own.

        A read worker runs one ticket in such a block: its pinned snapshots were committed
        before the ticket was issued, so one catch-up at its start finds them, and the
        ticket's other catalog reads need no more (each costs ~2 ms on a busy catalog).
        """
        if self._secondary_dir is None or getattr(self._local, "caught_up", False):
            yield
            return
        self._catch_up_after(time.monotonic())
        self._local.caught_up = True
        try:
            yield
        finally:
            self._local.caught_up = False

    @contextlib.contextmanager
    def consistent_reads(self) -> Iterator[None]:
        """Point reads (``get``) in the block, on this thread, see the database at one moment.

        A statement that names several tables pins each by reading its pointer; a multi-table
        commit (a transaction, a multi-table CDC batch) lands all its pointers in one batch, so
        reading them from one RocksDB snapshot never shows one table with that commit and
        another without it. A read-only (secondary) instance has no snapshots: its reads are
        as fresh as its last catch-up. Nested blocks share the outer block's snapshot.
        """
        if self.read_only or getattr(self._local, "view", None) is not None:
            yield
            return
        self._local.view = self.snapshot()
        try:
            yield
        finally:
            self._local.view = None

    def get(self, key: bytes) -> bytes | None:
        view: StoreSnapshot | None = getattr(self._local, "view", None)
        if view is not None:
            return view.get(key)
        return cast("bytes | None", self._db.get(key))

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Yield (key, value) for every key starting with ``prefix``, from ``start`` on."""
        it = self._db.iter()
        it.seek(start if start is not None else prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            it.next()

    def last_key(self, prefix: bytes) -> bytes | None:
        it = self._db.iter()
        it.seek_for_prev(keys.prefix_end(prefix))
        if it.valid() and it.key().startswith(prefix):
            key: bytes = it.key()
            return key
        return None

    def snapshot(self) -> StoreSnapshot:
        """A consistent read view of the database as it is now (a RocksDB snapshot; held
        until the returned object is dropped)."""
        return StoreSnapshot(self._db.snapshot())

    # -- writes ------------------------------------------------------------------------

    def write(self, puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = (), sync: bool = True) -> None:
        """Apply puts and deletes as one atomic batch; fsync the WAL before returning."""
        if self.read_only:
            raise PermissionError("catalog is open read-only")
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key in deletes:
            batch.delete(key)
        for key, value in puts.items():
            batch.put(key, value)
        self._db.write(batch, self._sync if sync else None)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        if self.read_only:
            raise PermissionError("catalog is open read-only")
        self._db.delete_range(begin, end, self._sync)

    def close(self) -> None:
        if self.closed:
            return  # idempotent: the server closes it at shutdown whoever closed it first
        self.closed = True
        try:
            self._db.close()
        finally:
            if self._secondary_dir is not None:
                shutil.rmtree(self._secondary_dir, ignore_errors=True)
