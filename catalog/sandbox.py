"""The warehouse is a sandbox: which files the server may read, write, list and delete.

Every location the server touches comes, in the end, from a client: a table location, a
``write.data.path`` property, a manifest a REST client wrote, a registered metadata file.
Checking such text at the few places it enters proved too weak (a namespace ``location``,
a symlink, a metadata log entry each got around it), so the decision lives here, in one place,
and is made on *real* paths: URL escapes decoded, ``..`` and symlinks resolved.

- ``Warehouse`` knows the warehouse's root and what the server keeps for itself inside it
  (``catalog.rocksdb/``, the token key). It validates table locations (strictly inside the
  warehouse, never the root, never inside or around a reserved entry) and answers whether a
  location lies under a table's folder.
- ``ConfinedFileIO`` is the FileIO every table gets: each ``new_input``, ``new_output`` and
  ``delete`` — data files, delete files, manifests, manifest lists, metadata, statistics —
  is refused with ``OutsideTableError`` unless it lies under that table's own folder. Code
  that opens files by other means (Arrow datasets, DuckDB) asks the table's FileIO first
  (``confine``).

An object-store warehouse follows the same rule on bucket + prefix (there are no symlinks;
``.`` / ``..`` segments are refused outright since stores do not resolve them).
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

from pyiceberg.exceptions import ForbiddenError
from pyiceberg.io import InputFile, OutputFile
from pyiceberg.io.pyarrow import PyArrowFile
from pyiceberg.table.metadata import TableMetadata

from catalog.durable_io import DurableFileIO

CATALOG_DIR = "catalog.rocksdb"
# What the server keeps in the warehouse root for itself: no table may live in, over or
# under these, and no FileIO may touch them.
RESERVED_NAMES: tuple[str, ...] = (CATALOG_DIR, ".icefloe-token.key")
RESERVED_PREFIX = ".icefloe"  # any other file of the server's own (".icefloe-*")

_LOCAL_SCHEMES = ("", "file")
_OBJECT_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "abfs": "abfs", "abfss": "abfs"}
_HIDING_ESCAPE = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
_DIR_TTL_S = 1.0  # how long a folder's resolved real path is reused (symlinks may change)


class OutsideTableError(ForbiddenError, PermissionError):
    """A file operation named a path outside the table's folder (or a reserved one).

    A ``PermissionError`` too, so that pyiceberg's own best-effort deletes (purge) log and
    skip such a file instead of deleting it.
    """


class InvalidLocationError(ValueError):
    """A location a client gave (table location, data path, metadata file) is not allowed."""


class TableLocationTakenError(InvalidLocationError):
    """A table location lies in, or around, another table's folder."""


def _table_message(what: str, location: str) -> str:
    shown = location if len(location) <= 200 else location[:200] + "..."
    return f"{what} {shown!r} lies outside the table's folder in the warehouse"


class Warehouse:
    """The warehouse root and the rules for paths inside it.

    Args:
        warehouse: The warehouse location: a local path, a ``file://`` URI, or an object-store
            URI (``s3://bucket/prefix``).
        reserved: Further local paths the server keeps for itself (e.g. a ``catalog-path``
            inside the warehouse).
    """

    def __init__(self, warehouse: str, reserved: Iterable[str] = ()) -> None:
        parsed = urlparse(warehouse)
        self.location = warehouse
        self.extra_reserved = tuple(reserved)
        self.local = parsed.scheme in _LOCAL_SCHEMES
        self._dirs: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        if self.local:
            path = parsed.path if parsed.scheme == "file" else warehouse
            self.root = os.path.realpath(os.path.abspath(path))
            names = [os.path.join(self.root, name) for name in RESERVED_NAMES]
            self._reserved = tuple(os.path.realpath(p) for p in (*names, *reserved))
        else:
            scheme = _OBJECT_SCHEMES.get(parsed.scheme)
            if scheme is None or not parsed.netloc:
                raise ValueError(f"unsupported warehouse location {warehouse!r}")
            key = _object_key(parsed.path)
            if key is None:
                raise ValueError(f"the warehouse location {warehouse!r} has '.' or '..' segments")
            self.root = f"{scheme}://{parsed.netloc}" + (f"/{key}" if key else "")
            self._reserved = ()

    # -- canonical forms -----------------------------------------------------------------

    def canonical(self, location: str) -> str | None:
        """The real location ``location`` names, or None when it cannot name a file here.

        Local: the path an opener uses (a plain path, or a ``file:`` URI's path), with ``..``
        and symlinks resolved; the lexical reading of ``..`` (``os.path.abspath``, as
        pyiceberg's FileIO does) must agree with the real one. Escapes that hide a dot, a
        slash or a NUL (``%2e``, ``%2f``, ``%5c``, ``%00``) are refused outright: whether a
        reader decodes them differs between engines. Object stores: scheme, bucket and key,
        with no ``.`` / ``..`` segment.
        """
        if not isinstance(location, str) or not location or "\x00" in location or len(location) > 4096:
            return None
        if location[0] == "/" and self.local and "%" not in location and "/." not in location \
                and "//" not in location:
            return self._real(location)  # the common case: a plain, normal absolute path
        if _HIDING_ESCAPE.search(location):
            return None
        parsed = urlparse(location)
        if self.local:
            if parsed.scheme == "file":
                if parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment:
                    return None
                path = parsed.path
            elif parsed.scheme == "":
                path = location
            else:
                return None
            if not path.startswith("/"):
                return None
            reals = {self._real(path), self._real(os.path.normpath(path))}
            return reals.pop() if len(reals) == 1 else None
        scheme = _OBJECT_SCHEMES.get(parsed.scheme)
        if scheme is None or parsed.query or parsed.fragment:
            return None
        key = _object_key(parsed.path)
        if key is None:
            return None
        return f"{scheme}://{parsed.netloc}/{key}".rstrip("/")

    def _real(self, path: str) -> str:
        """``os.path.realpath`` with the folder's answer reused for a moment (a scan checks
        thousands of files in a handful of folders); the file itself is always lstat'd."""
        folder, name = os.path.split(path)
        if not name or name in (".", "..") or "/../" in path or "/./" in path:
            return os.path.realpath(path)  # rare: resolve exactly, the slow way
        now = time.monotonic()
        cached = self._dirs.get(folder)
        if cached is not None and now - cached[0] < _DIR_TTL_S:
            real_folder = cached[1]
        else:
            real_folder = os.path.realpath(folder)
            with self._lock:
                if len(self._dirs) > 4096:
                    self._dirs.clear()
                self._dirs[folder] = (now, real_folder)
        full = os.path.join(real_folder, name)
        try:
            mode = os.lstat(full).st_mode
        except OSError:
            return full
        return os.path.realpath(full) if stat.S_ISLNK(mode) else full

    def as_uri(self, location: str) -> str:
        """``location`` in the spelling the catalog hands out: a plain absolute path of a local
        warehouse becomes its ``file://`` URI (the same file); anything else is unchanged."""
        if self.local and location.startswith("/") and not location.startswith("//"):
            return f"file://{location}"
        return location

    def with_uri_location(self, metadata: TableMetadata) -> TableMetadata:
        """``metadata`` with its table location in the spelling handed out. A table created
        before local locations carried the scheme is handed out, and its next metadata,
        manifests and data files are written, under its ``file://`` URI (the same folder; its
        older files keep their plain paths, which every reader and this sandbox accept)."""
        location = self.as_uri(metadata.location)
        return metadata if location == metadata.location else metadata.model_copy(update={"location": location})

    # -- rules ---------------------------------------------------------------------------

    @staticmethod
    def _under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def reserved(self, real: str) -> bool:
        """Whether a real path is, or lies inside, something the server keeps for itself."""
        if any(self._under(real, r) for r in self._reserved):
            return True
        if self.local and real.startswith(self.root) and real[len(self.root):len(self.root) + 1] == "/":
            return real[len(self.root) + 1:].startswith(RESERVED_PREFIX)
        return False

    def inside(self, location: str) -> bool:
        """Whether ``location`` lies inside the warehouse and outside every reserved entry."""
        real = self.canonical(location)
        return real is not None and self._under(real, self.root) and not self.reserved(real)

    def table_root(self, location: str, what: str = "table location") -> str:
        """Validate a table's location and return its real form.

        A table lives strictly inside the warehouse (never the root itself), not inside a
        reserved entry and not around one.

        Raises:
            InvalidLocationError: The location is not allowed.
        """
        real = self.canonical(location) if isinstance(location, str) else None
        if real is None:
            raise InvalidLocationError(f"{what} {str(location)[:200]!r} is not a valid location of this warehouse")
        if not self._under(real, self.root) or real == self.root.rstrip("/"):
            raise InvalidLocationError(f"{what} {location[:200]!r} must be a folder strictly inside the warehouse")
        if self.reserved(real) or any(self._under(r, real) for r in self._reserved):
            raise InvalidLocationError(f"{what} {location[:200]!r} overlaps a folder the server keeps for itself")
        return real

    def check_under(self, location: str, root: str, what: str) -> str:
        """Validate that ``location`` (a file a client names) lies under table folder ``root``
        (a real path from ``table_root``); return its real form.

        Raises:
            InvalidLocationError: It does not.
        """
        real = self.canonical(location) if isinstance(location, str) else None
        if real is None or not self._under(real, root) or self.reserved(real):
            raise InvalidLocationError(_table_message(what, str(location)))
        return real

    def confine(self, location: str, root: str | None) -> str:
        """The real form of ``location`` if the server may touch it for table folder ``root``
        (None: anywhere in the warehouse outside reserved entries).

        Raises:
            OutsideTableError: It may not.
        """
        real = self.canonical(location) if isinstance(location, str) else None
        bound = root if root is not None else self.root
        if real is None or not self._under(real, bound) or self.reserved(real):
            where = "the table's folder" if root is not None else "the warehouse"
            raise OutsideTableError(f"refused: {str(location)[:200]!r} lies outside {where}")
        return real


def _object_key(path: str) -> str | None:
    """An object key without leading/trailing '/', or None if it has '.' / '..' segments."""
    key = path.strip("/")
    if any(segment in (".", "..") for segment in key.split("/")):
        return None
    return key


class ConfinedFileIO(DurableFileIO):
    """A table's FileIO: durable like ``DurableFileIO``, and unable to leave its table's folder.

    Args:
        properties: FileIO properties (the catalog's, never a table's: a table property must
            not choose the FileIO class or its endpoint).
        warehouse: The warehouse's rules.
        root: The real path of the table's folder (``Warehouse.table_root``), or None for an
            IO confined to the warehouse as a whole (reading a pointer's metadata file).
    """

    def __init__(self, properties: dict[str, str], warehouse: Warehouse, root: str | None) -> None:
        super().__init__(properties)
        self.warehouse = warehouse
        self.root = root

    def confine(self, location: str) -> str:
        """The real form of ``location``; raises ``OutsideTableError`` outside this IO's folder."""
        return self.warehouse.confine(location, self.root)

    def new_input(self, location: str) -> PyArrowFile:
        self.confine(location)
        return super().new_input(location)

    def new_output(self, location: str) -> PyArrowFile:
        self.confine(location)
        return super().new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        self.confine(path)
        super().delete(location)


def confine(io: Any, location: str) -> None:
    """Check ``location`` against ``io`` when it is a ``ConfinedFileIO`` (code that opens
    files itself, with Arrow or DuckDB, calls this first)."""
    if isinstance(io, ConfinedFileIO):
        io.confine(location)
