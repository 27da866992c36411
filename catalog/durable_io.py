"""A pyiceberg FileIO whose local files are fsync'd when they are closed.

A commit moves the table pointer only after the metadata it points at — and every manifest
and data file that metadata references — is on disk. pyiceberg writes all of those through
``FileIO.new_output``, so making each local output stream fsync the file and its folder on
close gives that guarantee without tracking paths. Object stores need nothing extra: an
object is durable once its PUT returns.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs
from pyiceberg.io import FileIO, InputFile, OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from catalog.object_reads import CachedMetadataFile, is_immutable_metadata, shared_cache
from catalog.object_store import OBJECT_SCHEMES
from catalog.object_writes import DeadlineStream, close_deadline_s


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def local_path(location: str) -> str | None:
    """The local filesystem path of a location (None for object stores)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return parsed.path
    return location if parsed.scheme == "" else None


def local_paths(locations: Iterable[str]) -> list[str]:
    """The local filesystem paths of those locations that have one (object stores have none)."""
    return [p for p in map(local_path, locations) if p]


def fsync_file_and_dir(path: str) -> None:
    fsync_path(path)
    fsync_path(os.path.dirname(path) or ".")


_fsync_pool: ThreadPoolExecutor | None = None
_fsync_pool_lock = threading.Lock()
# fsyncs started ahead of ``fsync_all`` (see PendingSync), by path. Weak: the PendingSync that
# started them holds them, so an abandoned commit's entries go with it.
_started: weakref.WeakValueDictionary[str, Future[None]] = weakref.WeakValueDictionary()


def _pool() -> ThreadPoolExecutor:
    global _fsync_pool
    with _fsync_pool_lock:
        if _fsync_pool is None:
            _fsync_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="icefloe-fsync")
        return _fsync_pool


def background_fsync(path: str) -> Future[None]:
    """fsync ``path`` in the fsync pool; the caller need not wait (see _RollingFile)."""
    return _pool().submit(fsync_path, path)


class PendingSync(list[str]):
    """Paths whose fsync starts in the background the moment each is added.

    A commit's files are closed one after another while it still has CPU work to do (the
    manifest, the manifest list, the metadata JSON); starting each file's fsync at once hides
    the disk's latency behind that work. ``fsync_all`` of these paths then only waits.
    """

    def __init__(self, paths: Iterable[str] = ()) -> None:
        super().__init__()
        self._futures: list[Future[None]] = []
        for path in paths:
            self.append(path)

    def append(self, path: str) -> None:
        super().append(path)
        future = _pool().submit(fsync_path, path)
        self._futures.append(future)
        _started[os.path.abspath(path)] = future


# Paths closed in this context (thread) while a deferral scope is open; see deferred_fsync.
_scope: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("icefloe_deferred_fsync", default=None)


@contextlib.contextmanager
def deferred_fsync() -> Iterator[list[str]]:
    """Within the block, files closed by this thread are listed (and their fsync started in
    the background) instead of fsync'd on close.

    The caller must ``fsync_all`` the list before anything references those files (the
    appender does it right before the catalog's RocksDB batch, in one concurrent round).
    """
    pending = PendingSync()
    token = _scope.set(pending)
    try:
        yield pending
    finally:
        _scope.reset(token)


def fsync_all(paths: list[str]) -> None:
    """Make files and their folders durable, concurrently (one journal commit instead of
    many); a file whose fsync a PendingSync started is waited for, not synced again."""
    futures: list[Future[None]] = []
    fresh: list[str] = []
    for path in dict.fromkeys(paths):
        started = _started.pop(os.path.abspath(path), None)
        if started is not None:
            futures.append(started)
        else:
            fresh.append(path)
    targets = [*fresh, *dict.fromkeys(os.path.dirname(p) or "." for p in paths)]
    if len(targets) <= 1 and not futures:
        for target in targets:
            fsync_path(target)
        return
    pool = _pool()
    futures += [pool.submit(fsync_path, t) for t in targets]
    for future in futures:
        future.result()


class _SyncOnClose:
    """Wraps an output stream so that closing it makes the file durable."""

    def __init__(self, stream: Any, path: str, deferred: list[str] | None = None,
                 on_closed: Any = None) -> None:
        self._stream = stream
        self._path = path
        self._synced = False
        self._deferred = deferred
        self._on_closed = on_closed  # told the file's length (the stream's position) on close

    def write(self, data: bytes) -> int:
        return int(self._stream.write(data))

    def close(self) -> None:
        if self._on_closed is not None and not self._stream.closed:
            self._on_closed(int(self._stream.tell()))
            self._on_closed = None
        self._stream.close()
        if not self._synced:
            self._synced = True
            deferred = self._deferred if self._deferred is not None else _scope.get()
            if deferred is not None:
                deferred.append(self._path)  # the owner fsyncs it before the commit lands
            else:
                fsync_file_and_dir(self._path)

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _SyncOnClose:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _DurableFile(PyArrowFile):
    _deferred: list[str] | None = None
    # The length of the file this object wrote and closed (a new file: its stream's position
    # at close). pyiceberg asks a manifest's output file for its length right after
    # writing it (``len()``, a stat() each time); this answers without one.
    _closed_length: int | None = None

    def create(self, overwrite: bool = False) -> OutputStream:
        stream = super().create(overwrite=overwrite)
        self._closed_length = None
        return _SyncOnClose(stream, self._path, self._deferred, self._closed)

    def _closed(self, written: int) -> None:
        self._closed_length = written

    def __len__(self) -> int:
        if self._closed_length is not None:
            return self._closed_length
        return super().__len__()


class _BoundedObjectFile(PyArrowFile):
    """An object-store file whose output stream's close ends in bounded time (object_writes)."""

    _deadline_s: float

    def create(self, overwrite: bool = False) -> OutputStream:
        # Not pyiceberg's exists() check first: on an object store it is a HEAD request (a round
        # trip per file, four per append) and guards nothing, as S3 cannot create-if-absent
        # atomically; every file icefloe creates has a new unique (UUID) name.
        stored = None
        if is_immutable_metadata(self.location):
            stored = functools.partial(shared_cache().put, self.location)
        return DeadlineStream(super().create(overwrite=True), self._deadline_s, stored)


class DurableFileIO(PyArrowFileIO):
    """PyArrowFileIO that fsyncs every local file (and its folder) when it is closed.

    ``defer_fsync()`` switches one instance to collecting paths instead, so that a writer
    producing several files (an append's manifests) can make them durable in one concurrent
    round with ``sync_deferred()`` before it commits.
    """

    _deferred: list[str] | None = None

    def defer_fsync(self) -> None:
        self._deferred = PendingSync()

    def sync_deferred(self) -> None:
        """fsync every file closed since ``defer_fsync`` (and their folders); stop deferring."""
        fsync_all(self.take_deferred())

    def take_deferred(self) -> list[str]:
        """The files closed since ``defer_fsync`` (not yet durable); stop deferring."""
        pending, self._deferred = self._deferred, None
        return pending or []

    def new_input(self, location: str) -> PyArrowFile:
        found = super().new_input(location)
        scheme, _, _ = self.parse_location(location, self.properties)
        if scheme not in OBJECT_SCHEMES or not is_immutable_metadata(location):
            return found
        # Manifests, manifest lists and metadata files never change: kept in memory by path
        # (object_reads), and read within a deadline.
        cached = CachedMetadataFile.__new__(CachedMetadataFile)
        cached.__dict__.update(found.__dict__)
        cached._cache = shared_cache()
        cached._deadline_s = close_deadline_s(self.properties)
        return cached

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        shared_cache().discard(path)
        super().delete(location)

    def new_output(self, location: str) -> PyArrowFile:
        scheme, _, path = self.parse_location(location, self.properties)
        output = super().new_output(location)
        if scheme in OBJECT_SCHEMES:
            bounded = _BoundedObjectFile.__new__(_BoundedObjectFile)
            bounded.__dict__.update(output.__dict__)
            bounded._deadline_s = close_deadline_s(self.properties)
            return bounded
        if scheme != "file":
            return output
        durable = _DurableFile.__new__(_DurableFile)
        durable.__dict__.update(output.__dict__)
        durable._path = path
        durable._deferred = self._deferred
        return durable

    def _initialize_s3_fs(self, netloc: str | None) -> pafs.FileSystem:
        """pyiceberg's S3 filesystem, opening output streams lazily (``allow_delayed_open``):
        an object smaller than one upload part (every manifest, manifest list and metadata
        file) is then one PUT at close, not a multipart upload begun at open (three
        requests, each a round trip to the store)."""
        built = super()._initialize_s3_fs(netloc)
        rebuild, (options,) = built.__reduce__()  # the options pyiceberg chose, to change one
        return rebuild({**options, "allow_delayed_open": True})


def _confine(file_io: FileIO, location: str) -> None:
    # A table's FileIO (catalog.sandbox.ConfinedFileIO) refuses paths outside its folder; the
    # direct os calls below must ask it too.
    check = getattr(file_io, "confine", None)
    if check is not None:
        check(location)


def write_new(file_io: FileIO, location: str, data: bytes, pending: list[str] | None = None) -> None:
    """Write a new file holding ``data`` (refused if it exists).

    A local file of a ``DurableFileIO`` is created and written with one ``write`` (no stream
    object, no filesystem set-up: a commit writes two or three small files and their pyarrow
    streams cost more than their bytes). Its durability is as ``DurableFileIO``'s: the path
    goes to ``pending`` (its fsync starts now when that is a ``PendingSync``), else to the
    thread's ``deferred_fsync`` scope, else the file and its folder are fsync'd before this
    returns. Other locations are written through ``file_io``.

    Raises:
        FileExistsError: The file exists.
        OSError: It could not be written (a partly written local file is removed).
    """
    _confine(file_io, location)
    local = local_path(location) if isinstance(file_io, DurableFileIO) else None
    if local is None:
        with file_io.new_output(location).create(overwrite=False) as stream:
            stream.write(data)
        return
    try:
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        os.unlink(local)
        raise
    os.close(fd)
    deferred = pending if pending is not None else _scope.get()
    if deferred is not None:
        deferred.append(local)
    else:
        fsync_file_and_dir(local)


def remove(file_io: FileIO, location: str) -> None:
    """Delete a file (a local one of a ``DurableFileIO`` directly).

    Raises:
        FileNotFoundError: It does not exist.
        OSError: It could not be deleted.
    """
    _confine(file_io, location)
    local = local_path(location) if isinstance(file_io, DurableFileIO) else None
    if local is None:
        file_io.delete(location)
    else:
        os.unlink(local)
