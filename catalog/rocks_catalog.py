"""``RocksCatalog``: a pyiceberg catalog whose catalog of record lives in RocksDB.

Every table change is one fsync'd RocksDB write batch holding the new table pointer, the next
commit sequence number and the commit-log record, guarded by a compare-and-swap on the
current metadata location. Metadata, manifests and data files are made durable (see
``durable_io``) before that batch is written, so a crash at any point leaves either the old
table or the new one, plus at worst unreferenced files for maintenance to remove.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, StagedTable, Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View
from pyiceberg.view.metadata import ViewVersion

from catalog import (
    avro_cache,
    keys,
    manifest_list_cache,
    namespaces,
    table_commits,
    table_files,
    table_locations,
    table_pointers,
    views,
)
from catalog.catalog_errors import CatalogReadOnlyError, MetadataFileMissingError
from catalog.commit_log import CommitLog, CommitRecord
from catalog.commit_writer import Commit, CommitWriter, log_retention, pointer_value
from catalog.metadata_json import write_metadata
from catalog.names import (
    EmptyNamespaceError,
    InvalidNameError,
    check_name,
    check_namespace,
    check_properties,
)
from catalog.object_reads import RecentlySeen
from catalog.object_store import is_object_store
from catalog.pins import SnapshotPins
from catalog.sandbox import (
    CATALOG_DIR,
    ConfinedFileIO,
    InvalidLocationError,
    OutsideTableError,
    Warehouse,
)
from catalog.store import RocksStore, StoreLockedError
from catalog.subscriptions import CommitHub
from catalog.table import RocksTable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.typedef import TableVersion

logger = logging.getLogger("icefloe.catalog")

READ_ONLY = "read-only"  # "true", "false" or "auto" (read-only when another process writes)
CATALOG_PATH = "catalog-path"  # where the RocksDB lives when the warehouse is not local
DEFAULT_IO_IMPL = "catalog.durable_io.DurableFileIO"
# Commit-log retention, applied by ``trim_commit_log`` (never past a hold, see CommitLog.set_hold).

# Table defaults that keep metadata bounded so commit cost does not grow with history.
DEFAULT_TABLE_PROPERTIES = {
    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "20",
    TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
}


class RocksCatalog(MetastoreCatalog):
    """Iceberg catalog backed by RocksDB.

    Args:
        name: Catalog name.
        **properties: ``warehouse`` (a path, ``file://`` or ``s3://`` URI; required),
            ``read-only`` (``auto`` by default: read-write unless another process holds the
            warehouse), ``catalog-path`` (RocksDB folder for a non-local warehouse), and any
            pyiceberg FileIO property.

    Raises:
        ValueError: If no warehouse is given.
        CatalogReadOnlyError: If ``read-only`` is ``false`` and the warehouse is held elsewhere.
    """

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

    # -- helpers -----------------------------------------------------------------------

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

    def _pointer(self, ns: tuple[str, ...], table: str) -> dict[str, Any] | None:
        raw = self._store.get(keys.table_key(ns, table))
        return json.loads(raw) if raw is not None else None

    def _refuse_view_name(self, ns: tuple[str, ...], name: str) -> None:
        # Tables and views share one name space (Iceberg-Java's wording).
        if views.exists(self, ns, name):
            raise TableAlreadyExistsError(f"View with same name already exists: {'.'.join((*ns, name))}")

    def _ns_exists(self, ns: tuple[str, ...]) -> bool:
        return self._store.get(keys.namespace_key(ns)) is not None

    def _require_namespace(self, ns: tuple[str, ...]) -> None:
        if not self._ns_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(ns)}")

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

    def _table(self, ns: tuple[str, ...], table: str, location: str, metadata: TableMetadata) -> Table:
        return RocksTable(
            identifier=(*ns, table),
            metadata=metadata,
            metadata_location=location,
            io=self.table_io(metadata.location),
            catalog=self,
        )

    def table_root(self, location: str, identifier: tuple[str, ...] | None = None) -> str:
        """Validate a table location (see ``catalog.table_locations.check_root``)."""
        return table_locations.check_root(self, location, identifier)

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

    # -- tables ------------------------------------------------------------------------

    def _resolve_table_location(self, location: str | None, database_name: str, table_name: str) -> str:
        return table_locations.resolve(self, location, database_name, table_name)

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        self._check_writable()  # a create-table transaction would fail only at commit otherwise
        ns, table = self._split(identifier, err=InvalidNameError)
        self._require_namespace(ns)
        properties = {**DEFAULT_TABLE_PROPERTIES, **check_properties(properties, "table")}
        format_version = cast(
            "TableVersion", int(properties.get(TableProperties.FORMAT_VERSION, TableProperties.DEFAULT_FORMAT_VERSION))
        )
        iceberg_schema: Schema = self._convert_schema_if_needed(schema, format_version)
        table_location, root = table_locations.new_table_folder(self, location, ns, table)
        table_files.check_properties(self.files, root, properties)
        provider = load_location_provider(table_location, properties)
        metadata_location = provider.new_table_metadata_file_location()
        metadata = new_table_metadata(
            location=table_location,
            schema=iceberg_schema,
            partition_spec=partition_spec,
            sort_order=sort_order,
            properties=properties,
        )
        io = self.confined_io(root)
        return StagedTable(
            identifier=(*ns, table), metadata=metadata, metadata_location=metadata_location, io=io, catalog=self
        )

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        """Create a table.

        Raises:
            TableAlreadyExistsError: If a table with that name exists.
            NoSuchNamespaceError: If the namespace does not exist.
            CatalogReadOnlyError: If the catalog is open read-only.
        """
        self._check_writable()
        ns, table = self._split(identifier, err=InvalidNameError)
        self._require_namespace(ns)
        if self._pointer(ns, table) is not None:
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, table))}")
        staged = self._create_staged_table(identifier, schema, location, partition_spec, sort_order, properties)
        write_metadata(staged.metadata, staged.io, staged.metadata_location)
        return self._register_pointer(ns, table, staged.metadata_location, staged.metadata, "create", overwrite=False)

    def _register_pointer(
        self,
        ns: tuple[str, ...],
        table: str,
        location: str,
        metadata: TableMetadata,
        operation: str,
        overwrite: bool,
        counts: dict[str, int] | None = None,
    ) -> Table:
        """Point ``ns.table`` at ``metadata`` in one commit (see ``catalog.table_pointers.point``)."""
        table_pointers.point(self, ns, table, location, metadata, operation, overwrite, counts)
        return self._table(ns, table, location, metadata)

    def register_table(self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False) -> Table:
        """Register an existing metadata file as a table.

        Raises:
            TableAlreadyExistsError: If the table exists and ``overwrite`` is false.
            NoSuchNamespaceError: If the namespace does not exist.
        """
        ns, table, metadata = table_pointers.check_registration(self, identifier, metadata_location, overwrite)
        metadata = self.files.with_uri_location(metadata)
        return self._register_pointer(ns, table, metadata_location, metadata, "register", overwrite=overwrite)

    def load_table(self, identifier: str | Identifier) -> Table:
        """Load a table.

        Raises:
            NoSuchTableError: If the table does not exist.
            MetadataFileMissingError: If its metadata file is gone (a NoSuchTableError).
        """
        ns, table = self._split(identifier)
        self._refresh()
        pointer = self._pointer(ns, table)
        if pointer is None:
            raise NoSuchTableError(f"Table does not exist: {'.'.join((*ns, table))}")
        location = pointer["metadata_location"]
        return self._table(ns, table, location, self._read_metadata(ns, table, location, verify=True))

    def metadata_location_of(self, identifier: str | Identifier) -> str | None:
        """Where a table's current metadata is (None: no such table): one RocksDB read, for
        readers that keep what they loaded per metadata location (``engine.table_reads``)."""
        ns, table = self._split(identifier)
        self._refresh()
        pointer = self._pointer(ns, table)
        return None if pointer is None else str(pointer["metadata_location"])

    def table_exists(self, identifier: str | Identifier) -> bool:
        try:
            ns, table = self._split(identifier)
        except NoSuchTableError:
            return False
        self._refresh()
        return self._pointer(ns, table) is not None

    def drop_table(self, identifier: str | Identifier) -> None:
        """Drop a table (its files stay; use ``purge_table`` to delete them).

        Raises:
            NoSuchTableError: If the table does not exist.
        """
        table_pointers.drop(self, identifier)

    def purge_table(self, identifier: str | Identifier) -> None:
        """Drop a table and delete its files: only those under the table's own folder, through
        its confined FileIO (a file named outside it is logged and left alone).

        Raises:
            NoSuchTableError: If the table does not exist.
        """
        table = self.load_table(identifier)
        self.drop_table(identifier)
        table_files.purge(table)

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        """Rename a table; its files stay where they are (see ``catalog.table_pointers.rename``)."""
        return self._table(*table_pointers.rename(self, from_identifier, to_identifier))

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """Commit updates to a table (or create it, for a create-table transaction).

        Raises:
            NoSuchTableError: If the table does not exist (and this is not a create).
            CommitFailedException: A requirement is not met, or a concurrent commit won.
            CatalogReadOnlyError: If the catalog is open read-only.
        """
        return table_commits.commit_tables(self, [(table.name(), requirements, updates)])[0]

    def commit_tables(
        self, changes: Sequence[table_commits.TableChange], record_fields: Sequence[dict[str, Any]] | None = None
    ) -> list[CommitTableResponse]:
        """Commit changes to several tables atomically: one write batch for all, or nothing.

        Args:
            changes: (identifier, requirements, updates) per table; each table at most once.

        Returns:
            The new metadata and its location, per change, in order.

        Raises:
            ValueError: No change, or a table named twice.
            NoSuchTableError: A table does not exist (and its change does not create it).
            CommitFailedException: A requirement is not met or a concurrent commit won; no
                table changed.
            CatalogReadOnlyError: If the catalog is open read-only.
        """
        return table_commits.commit_tables(self, changes, record_fields)

    @staticmethod
    def _delete_old_metadata(io: FileIO, base: TableMetadata, metadata: TableMetadata) -> None:
        """No-op: pyiceberg's ``Table`` calls this after each commit with the *handle's*
        metadata as base (stale for a stale handle), deleting files a second time. The catalog
        already removed them in ``commit_table``, which also covers callers of
        ``commit_table`` that do not go through a ``Table``."""

    # -- namespaces --------------------------------------------------------------------

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        """Create a namespace and any missing parents (see ``catalog.namespaces.create``)."""
        namespaces.create(self, namespace, properties)


    def drop_namespace(self, namespace: str | Identifier) -> None:
        """Drop an empty namespace (see ``catalog.namespaces.drop``)."""
        namespaces.drop(self, namespace)


    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        """List the tables directly in a namespace.

        Raises:
            NoSuchNamespaceError: If it does not exist.
        """
        ns = self._namespace(namespace)
        self._refresh()
        self._require_namespace(ns)
        prefix = keys.table_prefix(ns)
        return [(*ns, key[len(prefix) :].decode("utf-8")) for key, _ in self._store.scan(prefix)]

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        """The direct children of a namespace, top-level namespaces for ``()``."""
        return namespaces.list_children(self, namespace)


    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        """Properties of a namespace.

        Raises:
            NoSuchNamespaceError: If it does not exist.
        """
        ns = self._namespace(namespace)
        self._refresh()
        raw = self._store.get(keys.namespace_key(ns))
        if raw is None:
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(ns)}")
        props: Properties = json.loads(raw)
        return props

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        try:
            ns = self._namespace(namespace)
        except NoSuchNamespaceError:
            return False
        self._refresh()
        return self._ns_exists(ns)

    def update_namespace_properties(
        self, namespace: str | Identifier, removals: set[str] | None = None, updates: Properties = EMPTY_DICT
    ) -> PropertiesUpdateSummary:
        """Remove and set namespace properties (see ``catalog.namespaces.update_properties``)."""
        return namespaces.update_properties(self, namespace, removals, updates)


    def _check_namespace_location(self, properties: Properties) -> None:
        namespaces.check_location(self, properties)


    # -- views (catalog.views) -----------------------------------------------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        ns = self._namespace(namespace)
        self._refresh()
        self._require_namespace(ns)
        return views.list_views(self, ns)

    def view_exists(self, identifier: str | Identifier) -> bool:
        try:
            ns, name = self._split(identifier)
        except NoSuchTableError:
            return False
        self._refresh()
        return views.exists(self, ns, name)

    def load_view(self, identifier: str | Identifier) -> View:
        ns, name = self._split(identifier)
        self._refresh()
        loaded = views.load(self, ns, name)
        return View((*ns, name), loaded.metadata)

    def drop_view(self, identifier: str | Identifier) -> None:
        ns, name = self._split(identifier)
        views.drop(self, ns, name)

    def rename_view(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> None:
        src = self._split(from_identifier)
        dst = self._split(to_identifier, err=InvalidNameError)
        views.rename(self, src, dst)

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        raise NotImplementedError("registering views is not supported by icefloe")

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        ns, name = self._split(identifier, err=InvalidNameError)
        iceberg_schema = assign_fresh_schema_ids(self._convert_schema_if_needed(schema))
        loaded = views.create(self, ns, name, iceberg_schema, view_version, location, dict(properties))
        return View((*ns, name), loaded.metadata)

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

