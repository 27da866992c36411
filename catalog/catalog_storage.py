"""What a ``RocksCatalog`` stands on: its RocksDB store, the warehouse files it may touch, and
the metadata it reads.

``CatalogStorage`` opens the warehouse and the store (read-write, or read-only when another
process holds it), resolves identifiers, reads table pointers and metadata files, hands out
FileIOs confined to the warehouse or one table's folder, lands commits through the
``CommitWriter`` and trims the commit log. The public table, namespace and view methods are
built on it (``rocks_catalog``, ``namespace_methods``, ``view_methods``); the modules they
delegate to see it through ``catalog_internals.CatalogInternals``, which it satisfies.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from catalog import avro_cache, keys, manifest_list_cache, table_locations, views
from catalog.catalog_errors import CatalogReadOnlyError, MetadataFileMissingError
from catalog.commit_log import CommitLog, CommitRecord
from catalog.commit_writer import Commit, CommitWriter, TablePointer, log_retention, pointer_value
from catalog.names import EmptyNamespaceError, InvalidNameError, check_name, check_namespace
from catalog.object_reads import RecentlySeen
from catalog.object_store import is_object_store
from catalog.pins import SnapshotPins
from catalog.sandbox import CATALOG_DIR, ConfinedFileIO, InvalidLocationError, OutsideTableError, Warehouse
from catalog.store import RocksStore, StoreLockedError
from catalog.subscriptions import CommitHub

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

logger = logging.getLogger("icefloe.catalog")

READ_ONLY = "read-only"  # "true", "false" or "auto" (read-only when another process writes)
CATALOG_PATH = "catalog-path"  # where the RocksDB lives when the warehouse is not local
DEFAULT_IO_IMPL = "catalog.durable_io.DurableFileIO"


class CatalogStorage(MetastoreCatalog):
    """The store, files and metadata reads under ``RocksCatalog`` (see the module doc); the
    public methods, and the documentation of its properties, are ``RocksCatalog``'s."""

    def __init__(self, name: str, **properties: str) -> None:
        avro_cache.install()  # manifests of one table share their Avro set-up
        manifest_list_cache.install()  # a manifest list reuses the last one's encoded entries
        warehouse = properties.get("warehouse")
        if not warehouse:
            raise ValueError("RocksCatalog needs a 'warehouse' property (a path or file:// / s3:// URI)")
        parsed = urlparse(warehouse)
        if parsed.scheme in ("", "file"):
            local = os.path.abspath(parsed.path if parsed.scheme == "file" else warehouse)
            # Every location handed out is a file:// URI, as Iceberg's catalogs give them
            # (engines and pyiceberg's suite expect the scheme). Tables created before kept
            # plain paths in their pointers and files: readers and the sandbox accept both.
            warehouse = f"file://{local}"
            db_path = properties.get(CATALOG_PATH) or os.path.join(local, CATALOG_DIR)
        else:
            db_path = properties.get(CATALOG_PATH) or ""
            if not db_path:
                raise ValueError(
                    f"a {parsed.scheme}:// warehouse needs a local '{CATALOG_PATH}' for the catalog database"
                )
        props = {"py-io-impl": DEFAULT_IO_IMPL, **properties, "warehouse": warehouse}
        super().__init__(name, **props)
        self.warehouse = warehouse
        # Which files the server may touch: every table's FileIO is confined by these rules.
        self.files = Warehouse(warehouse, reserved=[db_path] if parsed.scheme in ("", "file") else ())
        mode = str(props.get(READ_ONLY, "auto")).lower()
        if mode == "true":
            self._store = RocksStore(db_path, read_only=True)
        else:
            try:
                self._store = RocksStore(db_path, read_only=False)
            except StoreLockedError:
                if mode == "false":
                    raise CatalogReadOnlyError(
                        "the warehouse is held by another process (an icefloe server?); open it read-only"
                    ) from None
                logger.info("warehouse %s is held by another process; opened read-only", warehouse)
                self._store = RocksStore(db_path, read_only=True)
        self.log = CommitLog(self._store)
        # Snapshots that query tickets still need; expiry skips them (see catalog.pins).
        self.pins = SnapshotPins()
        self.hub = CommitHub(self.log)
        self.commit_writer = CommitWriter(self._store, self.log, self.hub)
        self._commit_lock = self.commit_writer.lock
        # (namespace, table) -> (metadata location, parsed metadata). Metadata is immutable.
        self._metadata_cache: dict[tuple[tuple[str, ...], str], tuple[str, TableMetadata]] = {}
        self._seen_metadata = RecentlySeen()

    # -- the store -----------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self._store.read_only

    @property
    def store(self) -> RocksStore:
        return self._store

    def check_writable(self) -> None:
        """Raise ``CatalogReadOnlyError`` if this catalog cannot commit."""
        self._check_writable()

    def _check_writable(self) -> None:
        if self._store.read_only:
            raise CatalogReadOnlyError(
                "this catalog is open read-only (another process, such as the icefloe server, holds the warehouse)"
            )

    def _refresh(self) -> None:
        self._store.refresh()

    def caught_up(self) -> AbstractContextManager[None]:
        """Catch a read-only catalog up with the writer once; reads in the block (this thread)
        skip their own catch-up (see ``RocksStore.caught_up``). A no-op for the writer."""
        return self._store.caught_up()

    def consistent_reads(self) -> AbstractContextManager[None]:
        """Table pointers read in the block (this thread) come from one moment of the catalog,
        so several tables loaded in it are never torn by a multi-table commit landing between
        two loads (see ``RocksStore.consistent_reads``)."""
        return self._store.consistent_reads()

    def _pointer(self, ns: tuple[str, ...], table: str) -> TablePointer | None:
        raw = self._store.get(keys.table_key(ns, table))
        if raw is None:
            return None
        pointer: TablePointer = json.loads(raw)
        return pointer

    def _refuse_view_name(self, ns: tuple[str, ...], name: str) -> None:
        # Tables and views share one name space (Iceberg-Java's wording).
        if views.exists(self, ns, name):
            raise TableAlreadyExistsError(f"View with same name already exists: {'.'.join((*ns, name))}")

    def _ns_exists(self, ns: tuple[str, ...]) -> bool:
        return self._store.get(keys.namespace_key(ns)) is not None

    def _require_namespace(self, ns: tuple[str, ...]) -> None:
        if not self._ns_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(ns)}")

    def _land(
        self,
        record_fields: dict[str, Any],
        puts: dict[bytes, bytes],
        deletes: tuple[bytes, ...] = (),
    ) -> CommitRecord:
        """Write one commit (caller holds ``_commit_lock``); see ``CommitWriter.land_many``."""
        return self._land_many([(record_fields, puts, deletes)])[0]

    def _land_many(self, commits: list[Commit]) -> list[CommitRecord]:
        """Write several commits as ONE durable batch (caller holds ``_commit_lock``)."""
        return self.commit_writer.land_many(commits)

    _pointer_value = staticmethod(pointer_value)

    # -- identifiers -----------------------------------------------------------------------

    @staticmethod
    def _namespace(namespace: str | Identifier, err: type[Exception] = NoSuchNamespaceError) -> tuple[str, ...]:
        levels = Catalog.identifier_to_tuple(namespace)
        try:
            return check_namespace(levels)
        except InvalidNameError as exc:
            if err is InvalidNameError:
                raise
            raise err(str(exc)) from None

    def _split(
        self, identifier: str | Identifier, err: type[Exception] = NoSuchTableError
    ) -> tuple[tuple[str, ...], str]:
        """Namespace and table name of an identifier.

        ``err`` is what an invalid identifier means to the caller: a table that cannot exist
        (``NoSuchTableError``, for reads and drops) or a refused name (``InvalidNameError``,
        for calls that would create one).
        """
        parts = Catalog.identifier_to_tuple(identifier)
        if len(parts) < 2:
            message = f"table identifier needs a namespace and a name: {identifier!r}"
            # As pyiceberg's catalogs do: creating "tbl" names no namespace that exists.
            raise EmptyNamespaceError(message) if err is InvalidNameError else err(message)
        try:
            return check_namespace(parts[:-1]), check_name(parts[-1], "table")
        except InvalidNameError as exc:
            if err is InvalidNameError:
                raise
            raise err(str(exc)) from None

    # -- metadata and files --------------------------------------------------------------

    def _read_metadata(self, ns: tuple[str, ...], table: str, location: str, verify: bool = False) -> TableMetadata:
        """The metadata at ``location``, parsed once and cached (metadata files are immutable).

        Args:
            verify: Check that a cached file still exists (a load does: a table whose metadata
                file was removed must fail the same way whether or not this process read the
                file before it went, and before or after a restart).

        Raises:
            MetadataFileMissingError: The file is gone.
        """
        cached = self._metadata_cache.get((ns, table))
        if cached is not None and cached[0] == location:
            if not verify or self._metadata_exists(location):
                return cached[1]
            self._metadata_cache.pop((ns, table), None)
            raise MetadataFileMissingError(location)
        try:
            metadata = FromInputFile.table_metadata(self._load_file_io(location=location).new_input(location))
        except FileNotFoundError:
            raise MetadataFileMissingError(location) from None
        metadata = self.files.with_uri_location(metadata)
        self._metadata_cache[(ns, table)] = (location, metadata)
        return metadata

    def _metadata_exists(self, location: str) -> bool:
        check = self._load_file_io(location=location).new_input(location).exists
        if not is_object_store(location):
            return bool(check())
        return self._seen_metadata.exists(location, check, time.monotonic())  # object_reads

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        """A FileIO confined to the warehouse (outside reserved entries).

        Table properties are ignored on purpose: a table must not pick the FileIO class or
        its endpoint. Table files go through ``table_io``, confined to the table's folder.
        """
        return ConfinedFileIO(self._io_properties(), self.files, None)

    def _io_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k != "py-io-impl"}

    def table_io(self, table_location: str) -> ConfinedFileIO:
        """The FileIO of the table at ``table_location``: it touches nothing outside that folder.

        Raises:
            OutsideTableError: The location is not a valid table folder of this warehouse
                (a table landed before the sandbox, with its folder at the warehouse root...).
        """
        try:
            root = self.files.table_root(table_location)
        except InvalidLocationError as exc:
            raise OutsideTableError(f"refused: {exc}") from None
        return self.confined_io(root)

    def confined_io(self, root: str) -> ConfinedFileIO:
        """The FileIO confined to ``root``, a table folder already validated (``table_root``)."""
        return ConfinedFileIO(self._io_properties(), self.files, root)

    def table_root(self, location: str, identifier: tuple[str, ...] | None = None) -> str:
        """Validate a table location (see ``catalog.table_locations.check_root``)."""
        return table_locations.check_root(self, location, identifier)

    # -- commit-log retention ------------------------------------------------------------

    def trim_commit_log(self, now_us: int | None = None) -> int:
        """Apply the commit-log retention properties; return the new log start.

        A record is dropped when it is not among the newest ``commit-log.retain-count``
        (default 1,000,000) or is older than ``commit-log.retain-age-s`` (default: no age
        limit), whichever drops more; but never a record above the lowest hold
        (``self.log.set_hold``). Readers whose cursor falls below the new start get
        ``CursorExpiredError``.

        Raises:
            CatalogReadOnlyError: If the catalog is open read-only.
            ValueError: If a retention property is not a non-negative integer.
        """
        self._check_writable()
        start = self.commit_writer.trim_log(*log_retention(self.properties), now_us)
        logger.info("commit log trimmed: log starts at %d", start)
        return start

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        self._store.close()
