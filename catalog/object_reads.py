"""Reads from an object store: immutable metadata files kept in memory, and reads that end.

On an object store every file open is a round trip or two (a HEAD for the size, then a GET),
and a query plans from a table's manifest list and manifests before it reads any data. Those
files, and the metadata JSON, are immutable: icefloe and every Iceberg writer give each new one
a new unique name and never rewrite it. So their bytes are kept in memory by path
(``MetadataBytes``, bounded in bytes by ``ICEFLOE_METADATA_CACHE_BYTES``) and a second plan of
the same snapshot makes no request for them. Only reads are served from memory: ``exists`` still
asks the store (a table load checks its metadata file is still there).

pyarrow's S3 client applies its request timeout only on Windows and macOS, so on Linux a GET
that is never answered would block its reader for good. A read of a metadata file here waits at
most its deadline (every attempt its request timeout) and then fails with
``ObjectStoreTimeout`` (the client sees UNAVAILABLE); the abandoned read ends when the store
answers or the connection drops.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from pyiceberg.io import InputStream
from pyiceberg.io.pyarrow import PyArrowFile

from catalog.env_settings import byte_budget
from catalog.object_store import within

logger = logging.getLogger("icefloe.catalog.object_reads")

CACHE_BYTES_ENV = "ICEFLOE_METADATA_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 128 << 20


def cache_budget() -> int:
    """Bytes of metadata files kept (``ICEFLOE_METADATA_CACHE_BYTES``, default 128 MiB; 0: none)."""
    return byte_budget(CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES, logger)


def is_immutable_metadata(location: str) -> bool:
    """Manifests and manifest lists (``.avro``) and metadata JSON files: never rewritten."""
    name = location.rsplit("/", 1)[-1]
    return "/metadata/" in location and (name.endswith(".avro") or name.endswith(".metadata.json"))


class MetadataBytes:
    """Least-recently-used file contents by location, adding up to at most ``budget`` bytes.

    A file larger than an eighth of the budget is not kept (it would push out many small ones).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, location: str) -> bytes | None:
        with self._lock:
            found = self._entries.get(location)
            if found is not None:
                self._entries.move_to_end(location)
            return found

    def put(self, location: str, data: bytes) -> None:
        if len(data) > self.budget // 8:
            return
        with self._lock:
            if location in self._entries:
                return
            self._entries[location] = data
            self._bytes += len(data)
            while self._bytes > self.budget:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped)

    def discard(self, location: str) -> None:
        with self._lock:
            dropped = self._entries.pop(location, None)
            if dropped is not None:
                self._bytes -= len(dropped)

    @property
    def size(self) -> int:
        return self._bytes


_cache: MetadataBytes | None = None
_cache_lock = threading.Lock()


def shared_cache() -> MetadataBytes:
    """The process's cache (one per process: every table's FileIO shares the budget)."""
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = MetadataBytes(cache_budget())
        return _cache


class CachedMetadataFile(PyArrowFile):
    """An immutable metadata file of an object store: read whole, once, within a deadline."""

    _cache: MetadataBytes
    _deadline_s: float

    def _contents(self) -> bytes:
        found = self._cache.get(self.location)
        if found is None:
            found = within(self._deadline_s, self._read_whole, "object-store-read")
            self._cache.put(self.location, found)
        return found

    def _read_whole(self) -> bytes:
        with PyArrowFile.open(self, seekable=False) as stream:
            return bytes(stream.read())

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._contents())

    def __len__(self) -> int:
        return len(self._contents())


# A query loads its table several times (prepare, describe, plan, each DoGet), and each load
# checks that the table's metadata file still exists: on an object store a HEAD each, ten per
# ADBC query. A file seen within this many seconds is not asked about again, so a removed
# metadata file still fails every load, at most this much later.
EXISTS_RECHECK_S = 1.0


class RecentlySeen:
    """Locations whose existence the store confirmed within ``EXISTS_RECHECK_S``."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def exists(self, location: str, check: Callable[[], bool], now: float) -> bool:
        seen = self._seen.get(location)
        if seen is not None and now - seen < EXISTS_RECHECK_S:
            return True
        if len(self._seen) > 4096:
            self._seen.clear()
        found = check()
        if found:
            self._seen[location] = now
        else:
            self._seen.pop(location, None)
        return found
