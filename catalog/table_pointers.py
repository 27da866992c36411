"""Commits that move table pointers without new metadata: create / register / replace
(``point``), ``drop`` and ``rename`` of ``RocksCatalog`` tables.

Each is one commit (``CommitWriter``): the pointer change and its commit-log record land in
one durable batch under the commit lock. Table files are not touched.
"""

from __future__ import annotations

import json

from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier

from catalog import keys, table_files, views
from catalog.catalog_internals import CatalogInternals
from catalog.names import InvalidNameError
from catalog.sandbox import InvalidLocationError


def point(
    catalog: CatalogInternals,
    ns: tuple[str, ...],
    table: str,
    location: str,
    metadata: TableMetadata,
    operation: str,
    overwrite: bool,
    counts: dict[str, int] | None = None,
) -> None:
    """Point ``ns.table`` at ``metadata`` in one commit (create, register, or replace).

    Raises ``TableAlreadyExistsError`` if it exists and ``overwrite`` is false.

    ``counts`` (added_rows / added_files / deleted_rows) describe data the new metadata
    already holds, e.g. a table created together with its first rows.
    """
    with catalog._commit_lock:
        catalog._require_namespace(ns)
        current = catalog._pointer(ns, table)
        if current is not None and not overwrite:
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, table))}")
        catalog._refuse_view_name(ns, table)
        snapshot = metadata.current_snapshot()
        catalog._land(
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
                keys.table_key(ns, table): catalog._pointer_value(
                    location, current["metadata_location"] if current else None, str(metadata.table_uuid)
                )
            },
        )
        catalog._metadata_cache[(ns, table)] = (location, metadata)


def drop(catalog: CatalogInternals, identifier: str | Identifier) -> None:
    """Drop a table (its files stay; use ``purge_table`` to delete them).

    Raises:
        NoSuchTableError: If the table does not exist.
    """
    catalog._check_writable()
    ns, table = catalog._split(identifier)
    with catalog._commit_lock:
        pointer = catalog._pointer(ns, table)
        if pointer is None:
            raise NoSuchTableError(f"Table does not exist: {'.'.join((*ns, table))}")
        catalog._land(
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
        catalog._metadata_cache.pop((ns, table), None)


def rename(
    catalog: CatalogInternals, from_identifier: str | Identifier, to_identifier: str | Identifier
) -> tuple[tuple[str, ...], str, str, TableMetadata]:
    """Rename a table; its files stay where they are. Returns its new name, metadata location
    and metadata.

    Raises:
        NoSuchTableError: If the source table does not exist.
        TableAlreadyExistsError: If the target name is taken.
        NoSuchNamespaceError: If the target namespace does not exist.
    """
    catalog._check_writable()
    src_ns, src = catalog._split(from_identifier)
    dst_ns, dst = catalog._split(to_identifier, err=InvalidNameError)
    with catalog._commit_lock:
        pointer = catalog._pointer(src_ns, src)
        if pointer is None:
            raise NoSuchTableError(f"Table does not exist: {'.'.join((*src_ns, src))}")
        catalog._require_namespace(dst_ns)
        if catalog._pointer(dst_ns, dst) is not None:
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*dst_ns, dst))}")
        if views.exists(catalog, dst_ns, dst):  # Iceberg-Java's wording
            raise TableAlreadyExistsError(f"Cannot rename {'.'.join((*src_ns, src))} to "
                                          f"{'.'.join((*dst_ns, dst))}. View already exists")
        location = pointer["metadata_location"]
        metadata = catalog._read_metadata(src_ns, src, location)
        catalog._land(
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
        catalog._metadata_cache.pop((src_ns, src), None)
        catalog._metadata_cache[(dst_ns, dst)] = (location, metadata)
    return dst_ns, dst, location, metadata


def check_registration(
    catalog: CatalogInternals, identifier: str | Identifier, metadata_location: str, overwrite: bool
) -> tuple[tuple[str, ...], str, TableMetadata]:
    """Name and metadata of a table to register from ``metadata_location``, checked: the file
    and every file its metadata names lie in the table's own folder inside the warehouse.

    Raises:
        TableAlreadyExistsError: If the table exists and ``overwrite`` is false.
        NoSuchNamespaceError: If the namespace does not exist.
        InvalidLocationError: A file lies outside the warehouse or the table's folder.
    """
    catalog._check_writable()
    ns, table = catalog._split(identifier, err=InvalidNameError)
    catalog._require_namespace(ns)
    if not overwrite and catalog._pointer(ns, table) is not None:
        raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, table))}")
    if not catalog.files.inside(metadata_location):
        raise InvalidLocationError(
            f"metadata file {str(metadata_location)[:200]!r} must lie inside the catalog's warehouse"
        )
    io = catalog._load_file_io(location=metadata_location)
    metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
    # Every file the registered metadata names must lie under its own table folder, as
    # for a commit: the server will read, rewrite and delete them.
    root = catalog.table_root(metadata.location, (*ns, table))
    table_files.check_metadata(catalog.confined_io(root), metadata, None, metadata_location)
    return ns, table, metadata
