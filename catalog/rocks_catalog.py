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
import threading
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
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

from catalog import avro_cache, keys, manifest_list_cache, table_commits, table_files, views
from catalog.commit_log import CommitLog, CommitRecord
from catalog.context import current_commit_context
from catalog.idempotency import batch_extras
from catalog.metadata_json import write_metadata
from catalog.names import (
    EmptyNamespaceError,
    InvalidNameError,
    check_name,
    check_namespace,
    check_properties,
    namespace_folder,
)
from catalog.pins import SnapshotPins
from catalog.sandbox import (
    CATALOG_DIR,
    ConfinedFileIO,
    InvalidLocationError,
    OutsideTableError,
    TableLocationTakenError,
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
LOG_RETAIN_COUNT = "commit-log.retain-count"  # keep at most this many newest records
LOG_RETAIN_AGE_S = "commit-log.retain-age-s"  # drop records older than this many seconds
DEFAULT_LOG_RETAIN_COUNT = 1_000_000

# Table defaults that keep metadata bounded so commit cost does not grow with history.
DEFAULT_TABLE_PROPERTIES = {
    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "20",
    TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
}


class CatalogReadOnlyError(ForbiddenError):
    """A write was attempted on a catalog opened read-only."""


class MetadataFileMissingError(NoSuchTableError):
    """The catalog points a table at a metadata file that is gone (deleted by hand, or lost
    with its storage). The table is listed and can be dropped, but not loaded. The message is
    Iceberg-Java's for the same case; the location is no secret (every load answer holds it)."""

    def __init__(self, location: str) -> None:
        super().__init__(f"Failed to open input stream for file: {location}")
        self.location = location


def _now_us() -> int:
    return time.time_ns() // 1000


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
            # Locations keep the form the caller gave (a path, or a file:// URI), so that
            # tools comparing them with the warehouse agree; readers accept both forms.
            warehouse = f"file://{local}" if parsed.scheme == "file" else local
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
        self._commit_lock = threading.Lock()
        # (namespace, table) -> (metadata location, parsed metadata). Metadata is immutable.
        self._metadata_cache: dict[tuple[tuple[str, ...], str], tuple[str, TableMetadata]] = {}

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
            if not verify or self._load_file_io(location=location).new_input(location).exists():
                return cached[1]
            self._metadata_cache.pop((ns, table), None)
            raise MetadataFileMissingError(location)
        try:
            metadata = FromInputFile.table_metadata(self._load_file_io(location=location).new_input(location))
        except FileNotFoundError:
            raise MetadataFileMissingError(location) from None
        self._metadata_cache[(ns, table)] = (location, metadata)
        return metadata

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
        """Validate a table location: inside the warehouse, and neither inside nor around
        another table's folder (``identifier`` names the table itself, which may keep its own).

        Raises:
            InvalidLocationError: It is not allowed.
        """
        root = self.files.table_root(location)
        for other in self._all_table_keys():
            if identifier is not None and other == identifier:
                continue
            pointer = self._pointer(other[:-1], other[-1])
            if pointer is None:
                continue
            try:
                other_location = self._read_metadata(other[:-1], other[-1], pointer["metadata_location"]).location
            except Exception:  # noqa: BLE001 - a table we cannot read has no folder to protect
                continue
            other_root = self.files.canonical(other_location)
            if other_root is None:
                continue
            if Warehouse._under(root, other_root) or Warehouse._under(other_root, root):
                raise TableLocationTakenError(
                    f"table location {location[:200]!r} overlaps the folder of table {'.'.join(other)}"
                )
        for other, folder in views.view_folders(self):
            other_root = self.files.canonical(folder) if other != identifier else None
            if other_root is not None and (Warehouse._under(root, other_root) or Warehouse._under(other_root, root)):
                raise TableLocationTakenError(
                    f"location {location[:200]!r} overlaps the folder of view {'.'.join(other)}")
        return root

    def _all_table_keys(self) -> list[tuple[str, ...]]:
        found = []
        for key, _ in self._store.scan(keys.TABLE):
            ns, name = keys.decode_table_key(key)
            found.append((*ns, name))
        return found

    def _land(
        self,
        record_fields: dict[str, Any],
        puts: dict[bytes, bytes],
        deletes: tuple[bytes, ...] = (),
    ) -> CommitRecord:
        """Write one commit (caller holds ``_commit_lock``): pointer changes + seq + log record.

        The record is published on ``hub`` once the batch is durable.
        """
        return self._land_many([(record_fields, puts, deletes)])[0]

    def _land_many(
        self, commits: list[tuple[dict[str, Any], dict[bytes, bytes], tuple[bytes, ...]]]
    ) -> list[CommitRecord]:
        """Write several table commits as ONE batch (caller holds ``_commit_lock``).

        Each commit gets its own log record and the next seq; the head moves to the last. The
        records are published on ``hub`` once the batch is durable.
        """
        ctx = current_commit_context()
        seq = self.log.head()
        batch: dict[bytes, bytes] = {}
        all_deletes: list[bytes] = []
        records: list[CommitRecord] = []
        for record_fields, puts, deletes in commits:
            seq += 1
            fields = dict(record_fields)
            if ctx.operation and fields.get("operation") not in ("create", "drop", "rename", "register", "replace"):
                fields["operation"] = ctx.operation
            extra = {**ctx.extra, **fields.pop("extra", {})}
            # A writer that knows exactly which rows it changed (SQL UPDATE / DELETE) says so;
            # the snapshot summary only gives net counts for a copy-on-write rewrite.
            exact = extra.pop("row_counts", None)
            if isinstance(exact, dict) and "snapshot_id" in fields:
                fields["added_rows"], fields["deleted_rows"] = int(exact["added"]), int(exact["deleted"])
            if extra.get("maintenance") and "snapshot_id" in fields:
                # Compaction and manifest merges change no row a reader sees (a compaction that
                # applies delete files drops deleted rows that no reader saw).
                fields.update(data_change=False, added_rows=0, deleted_rows=0)
            record = CommitRecord(
                seq=seq,
                committed_at_us=_now_us(),
                principal=ctx.principal,
                extra=extra,
                **fields,
            )
            batch.update(puts)
            # Writes that must land atomically with this commit (idempotency keys of appends).
            batch.update(batch_extras(record))
            batch[keys.log_key(seq)] = record.to_bytes()
            all_deletes.extend(deletes)
            records.append(record)
        batch[keys.HEAD_SEQ] = keys.encode_u64(seq)
        self._store.write(batch, tuple(all_deletes))
        # Published while the commit lock is still held, so subscribers and listeners (the
        # feed, lineage) receive records in sequence order. Publishing never blocks.
        for record in records:
            self.hub.publish(record)
        return records

    @staticmethod
    def _pointer_value(location: str, previous: str | None, table_uuid: str) -> bytes:
        return json.dumps(
            {"metadata_location": location, "previous_metadata_location": previous, "table_uuid": table_uuid}
        ).encode("utf-8")

    # -- tables ------------------------------------------------------------------------

    def _resolve_table_location(self, location: str | None, database_name: str, table_name: str) -> str:
        if location:
            return location.rstrip("/")
        ns = tuple(database_name.split("\x1f"))
        props = self.load_namespace_properties(ns)
        if ns_location := props.get("location"):
            return f"{ns_location.rstrip('/')}/{table_name}"
        return f"{self.warehouse.rstrip('/')}/{namespace_folder(ns)}/{table_name}"

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
        table_location = self._resolve_table_location(location, "\x1f".join(ns), table)
        try:
            root = self.table_root(table_location, (*ns, table))
        except TableLocationTakenError:
            if location:
                raise
            # The default folder is still another table's (renamed tables keep their folder):
            # this one gets a folder of its own next to it.
            table_location = f"{table_location}-{uuid.uuid4().hex[:8]}"
            root = self.table_root(table_location, (*ns, table))
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
        """Point ``ns.table`` at ``metadata`` in one commit (create, register, or replace).

        ``counts`` (added_rows / added_files / deleted_rows) describe data the new metadata
        already holds, e.g. a table created together with its first rows.
        """
        with self._commit_lock:
            self._require_namespace(ns)
            current = self._pointer(ns, table)
            if current is not None and not overwrite:
                raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, table))}")
            self._refuse_view_name(ns, table)
            snapshot = metadata.current_snapshot()
            self._land(
                {
                    "namespace": ns,
                    "table": table,
                    "table_uuid": str(metadata.table_uuid),
                    "operation": operation,
                    "snapshot_id": snapshot.snapshot_id if snapshot else None,
                    "parent_snapshot_id": snapshot.parent_snapshot_id if snapshot else None,
                    "metadata_location": location,
                    **(counts or {}),
                },
                {
                    keys.table_key(ns, table): self._pointer_value(
                        location, current["metadata_location"] if current else None, str(metadata.table_uuid)
                    )
                },
            )
            self._metadata_cache[(ns, table)] = (location, metadata)
        return self._table(ns, table, location, metadata)

    def register_table(self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False) -> Table:
        """Register an existing metadata file as a table.

        Raises:
            TableAlreadyExistsError: If the table exists and ``overwrite`` is false.
            NoSuchNamespaceError: If the namespace does not exist.
        """
        self._check_writable()
        ns, table = self._split(identifier, err=InvalidNameError)
        self._require_namespace(ns)
        if not overwrite and self._pointer(ns, table) is not None:
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, table))}")
        if not self.files.inside(metadata_location):
            raise InvalidLocationError(
                f"metadata file {str(metadata_location)[:200]!r} must lie inside the catalog's warehouse"
            )
        io = self._load_file_io(location=metadata_location)
        metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
        # Every file the registered metadata names must lie under its own table folder, as
        # for a commit: the server will read, rewrite and delete them.
        root = self.table_root(metadata.location, (*ns, table))
        table_files.check_metadata(self.confined_io(root), metadata, None, metadata_location)
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
        self._check_writable()
        ns, table = self._split(identifier)
        with self._commit_lock:
            pointer = self._pointer(ns, table)
            if pointer is None:
                raise NoSuchTableError(f"Table does not exist: {'.'.join((*ns, table))}")
            self._land(
                {
                    "namespace": ns,
                    "table": table,
                    "table_uuid": pointer.get("table_uuid"),
                    "operation": "drop",
                    "metadata_location": pointer["metadata_location"],
                },
                {},
                (keys.table_key(ns, table),),
            )
            self._metadata_cache.pop((ns, table), None)

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
        """Rename a table; its files stay where they are.

        Raises:
            NoSuchTableError: If the source table does not exist.
            TableAlreadyExistsError: If the target name is taken.
            NoSuchNamespaceError: If the target namespace does not exist.
        """
        self._check_writable()
        src_ns, src = self._split(from_identifier)
        dst_ns, dst = self._split(to_identifier, err=InvalidNameError)
        with self._commit_lock:
            pointer = self._pointer(src_ns, src)
            if pointer is None:
                raise NoSuchTableError(f"Table does not exist: {'.'.join((*src_ns, src))}")
            self._require_namespace(dst_ns)
            if self._pointer(dst_ns, dst) is not None:
                raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*dst_ns, dst))}")
            if views.exists(self, dst_ns, dst):  # Iceberg-Java's wording
                raise TableAlreadyExistsError(f"Cannot rename {'.'.join((*src_ns, src))} to "
                                              f"{'.'.join((*dst_ns, dst))}. View already exists")
            location = pointer["metadata_location"]
            metadata = self._read_metadata(src_ns, src, location)
            self._land(
                {
                    "namespace": dst_ns,
                    "table": dst,
                    "table_uuid": pointer.get("table_uuid"),
                    "operation": "rename",
                    "metadata_location": location,
                    "extra": {"renamed_from": ".".join((*src_ns, src))},
                },
                {keys.table_key(dst_ns, dst): json.dumps(pointer).encode("utf-8")},
                (keys.table_key(src_ns, src),),
            )
            self._metadata_cache.pop((src_ns, src), None)
            self._metadata_cache[(dst_ns, dst)] = (location, metadata)
        return self._table(dst_ns, dst, location, metadata)

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
        """Create a namespace (and any missing parent levels, without properties).

        Raises:
            NamespaceAlreadyExistsError: If it exists.
            NoSuchNamespaceError: If the identifier is empty or has an empty or whitespace-only
                level (``EmptyNamespaceError``, also an ``InvalidNameError``).
            InvalidNameError: If a level name is refused for its characters or length.
            ValueError: If a property key or value is not a string (None included).
        """
        self._check_writable()
        ns = self._namespace(namespace, err=InvalidNameError)
        checked = check_properties(properties, "namespace")
        self._check_namespace_location(checked)
        with self._commit_lock:
            if self._ns_exists(ns):
                raise NamespaceAlreadyExistsError(f"Namespace already exists: {'.'.join(ns)}")
            # Missing parent levels are created (without properties) in the same batch, so a
            # child namespace always has a parent that exists, lists and can be dropped last.
            puts = {
                keys.namespace_key(ns[:depth]): b"{}" for depth in range(1, len(ns)) if not self._ns_exists(ns[:depth])
            }
            puts[keys.namespace_key(ns)] = json.dumps(checked).encode("utf-8")
            self._store.write(puts)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        """Drop an empty namespace.

        Raises:
            NoSuchNamespaceError: If it does not exist.
            NamespaceNotEmptyError: If it holds tables or child namespaces.
        """
        self._check_writable()
        ns = self._namespace(namespace)
        with self._commit_lock:
            self._require_namespace(ns)
            tables = self.list_tables(ns)
            if tables:
                raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: {len(tables)} tables exist")
            if views.list_views(self, ns):
                raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: views exist")
            children = self.list_namespaces(ns)
            if children:
                raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: it has child namespaces")
            self._store.write({}, (keys.namespace_key(ns),))

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
        """List the direct children of a namespace (top-level namespaces for ``()``).

        Raises:
            NoSuchNamespaceError: If the parent does not exist.
        """
        parent = Catalog.identifier_to_tuple(namespace)
        self._refresh()
        if parent:
            ns = self._namespace(parent)
            self._require_namespace(ns)
            prefix = keys.namespace_key(ns) + keys.SEP.encode()
        else:
            prefix = keys.NAMESPACE
        children: set[tuple[str, ...]] = set()
        for key, _ in self._store.scan(prefix):
            levels = keys.decode_namespace(key[len(keys.NAMESPACE) :])
            children.add(levels[: len(parent) + 1])
        return sorted(children)

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
        """Remove and set namespace properties.

        Raises:
            NoSuchNamespaceError: If it does not exist.
            ValueError: If a key is both removed and updated, or a key or value is not a
                string (None included).
        """
        self._check_writable()
        ns = self._namespace(namespace)
        checked = check_properties(updates, "namespace")
        self._check_namespace_location(checked)
        if removals and any(not isinstance(key, str) for key in removals):
            raise ValueError("namespace property keys to remove must be strings")
        with self._commit_lock:
            current = self.load_namespace_properties(ns)
            summary, updated = self._get_updated_props_and_update_summary(current, removals, checked)
            self._store.write({keys.namespace_key(ns): json.dumps(updated).encode("utf-8")})
        return summary

    def _check_namespace_location(self, properties: Properties) -> None:
        """A namespace ``location`` (where its tables' folders go) lies inside the warehouse."""
        location = properties.get("location")
        if location is not None and not self.files.inside(location):
            raise InvalidLocationError(
                f"namespace location {str(location)[:200]!r} must lie inside the catalog's warehouse"
            )

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
        retain_count = self._int_property(LOG_RETAIN_COUNT, DEFAULT_LOG_RETAIN_COUNT)
        retain_age_s = self._int_property(LOG_RETAIN_AGE_S, None)
        with self._commit_lock:
            keep_after = self.log.head() - retain_count if retain_count is not None else 0
            if retain_age_s is not None:
                now = now_us if now_us is not None else _now_us()
                keep_after = max(keep_after, self.log.last_seq_before(now - retain_age_s * 1_000_000))
            start = self.log.trim(keep_after)
        logger.info("commit log trimmed: log starts at %d", start)
        return start

    def _int_property(self, name: str, default: int | None) -> int | None:
        raw = self.properties.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"catalog property {name} must be an integer, got {raw!r}") from None
        if value < 0:
            raise ValueError(f"catalog property {name} must not be negative, got {value}")
        return value

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        self._store.close()

