"""``RocksCatalog``: a pyiceberg catalog whose catalog of record lives in RocksDB.

Every table change is one fsync'd RocksDB write batch holding the new table pointer, the next
commit sequence number and the commit-log record, guarded by a compare-and-swap on the
current metadata location. Metadata, manifests and data files are made durable (see
``durable_io``) before that batch is written, so a crash at any point leaves either the old
table or the new one, plus at worst unreferenced files for maintenance to remove.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, StagedTable, Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from catalog import table_commits, table_files, table_locations, table_pointers
from catalog.metadata_json import write_metadata
from catalog.names import InvalidNameError, check_properties
from catalog.namespace_methods import NamespaceMethods
from catalog.table import RocksTable
from catalog.view_methods import ViewMethods

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.typedef import TableVersion


# Table defaults that keep metadata bounded so commit cost does not grow with history.
DEFAULT_TABLE_PROPERTIES = {
    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "20",
    TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
}


class RocksCatalog(ViewMethods, NamespaceMethods):
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

    The store, identifiers, metadata reads and confined FileIOs are ``CatalogStorage``'s
    (``catalog.catalog_storage``); namespaces are ``NamespaceMethods``, views ``ViewMethods``;
    tables are here.
    """

    # -- tables ------------------------------------------------------------------------

    def _table(self, ns: tuple[str, ...], table: str, location: str, metadata: TableMetadata) -> Table:
        return RocksTable(
            identifier=(*ns, table),
            metadata=metadata,
            metadata_location=location,
            io=self.table_io(metadata.location),
            catalog=self,
        )

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
