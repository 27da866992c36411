"""Iceberg tables as DuckDB sources: one pinned snapshot -> Arrow datasets + a renaming SELECT.

Columns are matched by Iceberg field id, not by name: every data file's Parquet footer says
which field id each physical column carries, files with the same id->name layout form one
``pyarrow.dataset`` and the table is the UNION ALL of one ``SELECT phys AS current`` per layout.
A column a file lacks (added later) is read through a synthetic name the file cannot contain,
so the dataset fills it with typed nulls. DuckDB pushes projections and filters through the
renaming SELECT into each dataset scan, which prunes row groups by their statistics.

String columns that a file stores as a small dictionary in every row group are read as
Arrow dictionaries and decoded by one ``take`` (the dataset casts them back to plain strings):
Arrow's Parquet reader materializes such strings value by value otherwise, which was a third of
the decoding work of a full scan (``bench_flightsql_scan``).

Data files never change, so their footers' id maps and dictionary columns are cached; snapshots
never change either, so a snapshot's file list is cached too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from catalog.arrow_types import view_columns
from catalog.deletes import DeleteSets, FileDeletes, file_filter, plan_files
from catalog.lru import LockedLRU
from catalog.object_store import filesystem, fs_path
from catalog.sandbox import confine
from flight_server.engine.deletes import POSITION_COLUMN, DeletedFile, deleted_dataset
from flight_server.engine.splits import ScanUnit, assign, scan_units

logger = logging.getLogger("icefloe.engine.iceberg")

# A column a file lacks is read under this name (the field id filled in): the dataset gives typed nulls.
MISSING_COLUMN = "__icefloe_missing_{}"
# A column chunk whose dictionary page is at most this big (compressed) has few distinct values
# and, almost surely, only dictionary-encoded data pages: writers fall back to plain pages only
# once a dictionary outgrows its limit (1 MiB in Arrow and parquet-java). Reading a column with
# plain pages as a dictionary would hash every value, so larger dictionaries read as strings.
_SMALL_DICTIONARY_BYTES = 32 * 1024


@dataclass(frozen=True)
class SourcePart:
    """One registered Arrow object and the SELECT list that maps it to the table's columns."""

    data: Any  # pyarrow Dataset or Table
    select_list: str
    columns: tuple[tuple[str, str], ...] = ()  # (column name in data, table column name), in order
    # Some files are read in part (row groups of a split scan): a reader of whole files
    # (scans.native_reader) cannot stand in for this dataset.
    partial_files: bool = False
    # Rows of these files are removed by delete files (engine.deletes.DeletedDataset): only the
    # dataset's own scanner reads them right.
    has_deletes: bool = False


@dataclass(frozen=True)
class _Footer:
    """What planning needs from a data file's footer (cached: data files never change)."""

    ids: tuple[tuple[int, str], ...]  # (field id, physical column name)
    dictionary: frozenset[str]  # top-level string columns read best as dictionaries
    views: frozenset[str] = frozenset()  # columns stored as views: must read as dictionaries
    has_ids: bool = True  # False: the file carries no field ids (matched by name)


# Snapshots with at most this many data files keep them (with their statistics: ~1-2 KB each,
# more for wide tables) in memory, for the ``KEPT_SNAPSHOTS`` most recently planned snapshots;
# a larger snapshot's manifests are read for each new filter, as before.
MAX_KEPT_FILES = 5_000
KEPT_SNAPSHOTS = 8


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IcebergSources:
    """Builds DuckDB source parts for (table, snapshot, schema) and caches what is immutable."""

    def __init__(self) -> None:
        self._files: LockedLRU[Any, Any] = LockedLRU(512)  # (table uuid, snapshot id, filter) -> files
        # (table uuid, snapshot id) -> every live data file with its statistics, so that each new
        # filter (a point lookup's key) is pruned in memory instead of reading the manifests again.
        self._snapshot_files: LockedLRU[Any, tuple[DataFile, ...]] = LockedLRU(KEPT_SNAPSHOTS)
        self._many: LockedLRU[Any, bool] = LockedLRU(64)  # snapshots past MAX_KEPT_FILES
        self._footers: LockedLRU[str, _Footer] = LockedLRU(65536)  # file path -> _Footer
        self._row_groups: LockedLRU[str, int] = LockedLRU(65536)  # file path -> row groups in its footer
        # (path, row groups, dictionary columns) -> (filesystem, fragment); see _fragment. Each
        # holds its file's footer (a few KB to ~100 KB for wide tables): 1024 of them.
        self._fragments: LockedLRU[Any, tuple[pafs.FileSystem, Any]] = LockedLRU(1024)
        # (table uuid, snapshot id) -> {data file path: the deletes that apply to it}
        self._deletes: LockedLRU[Any, dict[str, FileDeletes]] = LockedLRU(512)
        self.delete_sets = DeleteSets()

    def parts(
        self, table: Table, snapshot_id: int | None, schema: Schema, row_filter: BooleanExpression | None = None,
        split: tuple[int, int] | None = None,
    ) -> list[SourcePart]:
        """The sources of one table at one snapshot; ``split`` = (k, n): only part k of the
        scan units (data files, or row groups of files that have several) dealt into n parts
        by bytes (``splits.scan_units``, ``splits.assign``)."""
        # Regular (32-bit offset) strings and lists, as DuckDB returns them: no cast later on.
        arrow_schema = schema_to_pyarrow(schema, include_field_ids=False)
        arrow_schema = pa.schema([f.with_type(small_types(f.type)) for f in arrow_schema])
        if snapshot_id is None:
            return [_identity_part(empty_table(arrow_schema))]
        files = self.data_files(table, snapshot_id, row_filter)
        if not files:  # an empty table, or every file pruned by the row filter
            return [_identity_part(empty_table(arrow_schema))]
        deletes = self.file_deletes(table, snapshot_id)
        # The table's own S3 settings (endpoint, keys): from_uri would know neither.
        fs = filesystem(table.io, files[0][0])
        sizes = {path: size for path, size, _ in files}
        # path -> row groups to read (None: the whole file), in manifest order.
        chosen: dict[str, list[int] | None] = {}
        if split is None:
            chosen = {path: None for path, _, _ in files}
        else:
            k, n = split
            units = scan_units(files)
            for unit, part in zip(units, assign([u.bytes for u in units], n), strict=True):
                if part == k:
                    self._choose(chosen, unit, fs)
        if not chosen:
            return [_identity_part(empty_table(arrow_schema))]
        # Files with deletes form groups of their own (read through DeletedDataset).
        groups: dict[Any, list[tuple[str, list[int] | None]]] = {}
        dictionary: dict[Any, frozenset[str]] = {}
        views: dict[Any, frozenset[str]] = {}
        for path, row_groups in chosen.items():
            footer = self._footer(path, fs, _fs_path(path), schema, sizes.get(path))
            key = (tuple(sorted(footer.ids)), path in deletes)
            groups.setdefault(key, []).append((path, row_groups))
            # Only columns every file of the group stores as small dictionaries.
            dictionary[key] = dictionary[key] & footer.dictionary if key in dictionary else footer.dictionary
            # but a column any file stores as a view: a dictionary read is how its filters bind
            views[key] = views.get(key, frozenset()) | footer.views
        parts = []
        for key, group in groups.items():
            id_to_phys = dict(key[0])
            fields, select, columns = [], [], []
            for f, af in zip(schema.fields, arrow_schema, strict=True):
                phys = id_to_phys.get(f.field_id, MISSING_COLUMN.format(f.field_id))
                fields.append(pa.field(phys, af.type, nullable=True))
                select.append(f"{quote(phys)} AS {quote(f.name)}")
                columns.append((phys, f.name))
            physical = pa.schema(fields)
            partial = any(row_groups is not None for _, row_groups in group)
            as_dictionary = sorted((dictionary[key] | views[key]) & set(id_to_phys.values()))
            parquet = parquet_format(as_dictionary, fs)
            dataset: Any
            if key[1]:
                dataset = self._deleted(table, group, deletes, physical, parquet, fs, schema, id_to_phys)
            else:
                # Fragments that know their file's size (the manifest's): opening a file then
                # costs no size lookup (on an object store a HEAD request per file, twice: the
                # dataset's discovery and the reader's open).
                fragments = [self._fragment(parquet, tuple(as_dictionary), fs, p, row_groups, sizes.get(p))
                             for p, row_groups in group]
                dataset = ds.FileSystemDataset(fragments, schema=physical, format=parquet, filesystem=fs)
            parts.append(SourcePart(dataset, ", ".join(select), tuple(columns), partial or key[1], key[1]))
        return parts

    def _choose(self, chosen: dict[str, list[int] | None], unit: ScanUnit, fs: pafs.FileSystem) -> None:
        """Add ``unit`` to the files and row groups one part reads.

        A file whose footer does not have the row groups its manifest entry promised (a writer
        that set split_offsets otherwise) is read whole by the part holding its first unit, so
        every row is still read exactly once.
        """
        if unit.row_group is None:
            chosen[unit.path] = None
            return
        if self._row_group_count(unit.path, fs) != unit.row_groups:
            if unit.row_group == 0:
                chosen[unit.path] = None
            return
        wanted = chosen.setdefault(unit.path, [])
        if wanted is not None:
            wanted.append(unit.row_group)

    def _row_group_count(self, path: str, fs: pafs.FileSystem) -> int:
        cached = self._row_groups.get(path)
        if cached is None:
            cached = pq.read_metadata(_fs_path(path), filesystem=fs).num_row_groups
            self._row_groups.put(path, cached)
        return int(cached)

    def file_parts(
        self, table: Table, paths: list[str], schema: Schema, snapshot_id: int | None = None,
        positions: bool = False, known_deletes: dict[str, FileDeletes] | None = None,
    ) -> list[SourcePart]:
        """One part per data file, tagged with its index in ``paths`` as ``__icefloe_file``
        (SQL DELETE / UPDATE: which files the predicate touches); the deletes that apply to a
        file at ``snapshot_id`` are applied. ``positions``: also a column ``__icefloe_pos``, each
        row's position in its file (a merge-on-read DELETE / UPDATE deletes rows by position;
        every file is then read through the position-counting ``DeletedDataset``). ``known_deletes``:
        the deletes of ``paths`` as the caller planned them (saves planning the snapshot again)."""
        if known_deletes is not None:
            deletes = known_deletes
        else:
            deletes = self.file_deletes(table, snapshot_id) if snapshot_id is not None else {}
        arrow_schema = schema_to_pyarrow(schema, include_field_ids=False)
        arrow_schema = pa.schema([f.with_type(small_types(f.type)) for f in arrow_schema])
        names = ", ".join(quote(f.name) for f in schema.fields)
        if not paths:
            empty = empty_table(arrow_schema).append_column("__icefloe_file", pa.array([], pa.int64()))
            if positions:
                empty = empty.append_column(POSITION_COLUMN, pa.array([], pa.int64()))
                return [SourcePart(ds.dataset(empty), f"{names}, __icefloe_file, {POSITION_COLUMN}")]
            return [SourcePart(ds.dataset(empty), f"{names}, __icefloe_file")]
        fs = filesystem(table.io, paths[0])
        parts = []
        for index, path in enumerate(paths):
            lpath = _fs_path(path)
            footer = self._footer(path, fs, lpath, schema)
            id_to_phys = dict(footer.ids)
            parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=sorted(footer.views)))
            fields, select = [], []
            for f, af in zip(schema.fields, arrow_schema, strict=True):
                phys = id_to_phys.get(f.field_id, MISSING_COLUMN.format(f.field_id))
                fields.append(pa.field(phys, af.type, nullable=True))
                select.append(f"{quote(phys)} AS {quote(f.name)}")
            select.append(f"CAST({index} AS BIGINT) AS __icefloe_file")
            dataset: Any
            if positions:
                fields.append(pa.field(POSITION_COLUMN, pa.int64(), nullable=False))
                select.append(POSITION_COLUMN)
                dataset = self._deleted(table, [(path, None)], {path: deletes.get(path, FileDeletes())},
                                        pa.schema(fields), parquet, fs, schema, id_to_phys)
            elif path in deletes:
                dataset = self._deleted(table, [(path, None)], deletes, pa.schema(fields), parquet, fs, schema,
                                        id_to_phys)
            else:
                dataset = ds.dataset([lpath], schema=pa.schema(fields), format=parquet, filesystem=fs)
            parts.append(SourcePart(dataset, ", ".join(select), has_deletes=path in deletes))
        return parts

    def data_files(
        self, table: Table, snapshot_id: int, row_filter: BooleanExpression | None = None
    ) -> list[tuple[str, int, tuple[int, ...]]]:
        """(path, size in bytes, split offsets) of the snapshot's data files the row filter may
        match, in manifest order (from manifests only: no data file is opened)."""
        row_filter = row_filter or AlwaysTrue()
        key = (str(table.metadata.table_uuid), snapshot_id, repr(row_filter))
        cached = self._files.get(key)
        if cached is not None:
            return list(cached)
        every = self._every_data_file(table, snapshot_id)
        if every is None:  # too many files to keep: the manifests are read for this filter
            chosen = [planned.data_file for planned in plan_files(table.metadata, table.io, snapshot_id, row_filter)]
            for data_file in chosen:
                confine(table.io, data_file.file_path)
        elif isinstance(row_filter, AlwaysTrue):
            chosen = list(every)
        else:
            chosen = list(filter(file_filter(table, row_filter), every))
        files = [(f.file_path, int(f.file_size_in_bytes), tuple(int(o) for o in (f.split_offsets or ())))
                 for f in chosen]
        self._files.put(key, tuple(files))
        return files

    def _every_data_file(self, table: Table, snapshot_id: int) -> tuple[DataFile, ...] | None:
        """Every live data file of the snapshot in manifest order (None past ``MAX_KEPT_FILES``),
        each checked against the table's folder, and the delete files that apply to them too."""
        key = (str(table.metadata.table_uuid), snapshot_id)
        cached = self._snapshot_files.get(key)
        if cached is not None:
            return cached
        if self._many.get(key):
            return None
        planned = plan_files(table.metadata, table.io, snapshot_id)
        for item in planned:
            confine(table.io, item.data_file.file_path)  # nothing outside the table's folder is read
            for delete_file in item.deletes.files():
                confine(table.io, delete_file.file_path)  # delete and Puffin files alike
        if len(planned) > MAX_KEPT_FILES:
            self._many.put(key, True)
            return None
        every = tuple(item.data_file for item in planned)
        self._snapshot_files.put(key, every)
        return every

    def file_deletes(self, table: Table, snapshot_id: int) -> dict[str, FileDeletes]:
        """Data file path -> the delete files that apply to it, for the snapshot's files that
        have any (an empty dict for most tables)."""
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        summary = snapshot.summary if snapshot is not None else None
        if summary is not None and summary.get("total-delete-files") == "0":
            return {}  # most tables: no second pass over the manifests
        key = (str(table.metadata.table_uuid), snapshot_id)
        cached = self._deletes.get(key)
        if cached is not None:
            return cached
        found = {}
        for planned in plan_files(table.metadata, table.io, snapshot_id):
            if planned.deletes:
                for delete_file in planned.deletes.files():
                    confine(table.io, delete_file.file_path)
                found[planned.data_file.file_path] = planned.deletes
        self._deletes.put(key, found)
        return found

    def _deleted(
        self, table: Table, group: list[tuple[str, list[int] | None]], deletes: dict[str, FileDeletes],
        physical: pa.Schema, parquet: ds.ParquetFileFormat, fs: pafs.FileSystem, schema: Schema,
        id_to_phys: dict[int, str],
    ) -> Any:
        """The dataset of files with deletes; ``names`` maps every field id of the read schema
        (a column the file lacks reads as its typed-null stand-in)."""
        names = {f.field_id: id_to_phys.get(f.field_id, MISSING_COLUMN.format(f.field_id)) for f in schema.fields}
        files = [DeletedFile(_fs_path(p), p, deletes[p], row_groups) for p, row_groups in group]
        return deleted_dataset(table.io, self.delete_sets, files, physical, parquet, fs, names)

    def _fragment(
        self, parquet: ds.ParquetFileFormat, dictionary: tuple[str, ...], fs: pafs.FileSystem, path: str,
        row_groups: list[int] | None, size: int | None,
    ) -> Any:
        """A data file's fragment, kept: once a scan has read its footer the fragment holds it,
        and later scans of the file start from it (one request less per file on an object store)."""
        # Not keyed by the filesystem object (each table load builds its own): every table's
        # files are read with the catalog's one set of storage settings.
        key = (path, None if row_groups is None else tuple(row_groups), dictionary)
        cached = self._fragments.get(key)
        if cached is not None:
            return cached[1]
        fragment = parquet.make_fragment(_fs_path(path), filesystem=fs, row_groups=row_groups, file_size=size)
        fragment.ensure_complete_metadata()  # the footer, kept by the fragment for every later scan
        self._fragments.put(key, (fs, fragment))
        return fragment

    def footer_has_ids(self, path: str, local_path: str, schema: Schema) -> bool:
        """Whether the local data file ``path`` carries Parquet field ids (footer cached)."""
        return self._footer(path, pafs.LocalFileSystem(), local_path, schema).has_ids

    def _footer(self, path: str, fs: pafs.FileSystem, lpath: str, schema: Schema, size: int | None = None) -> _Footer:
        cached = self._footers.get(path)
        if cached is not None:
            return cached
        # Through a fragment that knows the file's size (the manifest's): no HEAD request first.
        meta = ds.ParquetFileFormat().make_fragment(lpath, filesystem=fs, file_size=size).metadata
        physical = meta.schema.to_arrow_schema()
        ids = footer_field_ids(physical)
        has_ids = bool(ids)
        if not ids:
            # Files without field ids (e.g. registered from elsewhere): match by current name.
            names = set(physical.names)
            ids = {f.field_id: f.name for f in schema.fields if f.name in names}
        footer = _Footer(tuple(ids.items()), dictionary_columns(meta, physical), view_columns(physical), has_ids)
        self._footers.put(path, footer)
        return footer


# Range reads sized for an object store's latency: a request costs about this long before its
# first byte and then moves this fast, so nearby column chunks are read as one request
# (pre_buffer coalesces them) rather than one round trip each.
_STORE_FIRST_BYTE_MS = 20
_STORE_MIB_PER_S = 200


def parquet_format(dictionary_columns: list[str], fs: pafs.FileSystem) -> ds.ParquetFileFormat:
    """The Parquet format of a scan: on an object store, column chunks are fetched ahead and
    coalesced (``pre_buffer`` with cache options sized for the store's latency)."""
    read_options = ds.ParquetReadOptions(dictionary_columns=dictionary_columns)
    if isinstance(fs, pafs.LocalFileSystem):
        return ds.ParquetFileFormat(read_options=read_options)
    cache = pa.CacheOptions.from_network_metrics(_STORE_FIRST_BYTE_MS, _STORE_MIB_PER_S)
    scan = ds.ParquetFragmentScanOptions(pre_buffer=True, cache_options=cache)
    return ds.ParquetFileFormat(read_options=read_options, default_fragment_scan_options=scan)


def footer_field_ids(physical: pa.Schema) -> dict[int, str]:
    """Field id -> column name of a Parquet file's top-level columns that carry an id."""
    ids: dict[int, str] = {}
    for f in physical:
        raw = (f.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            ids[int(raw)] = f.name
    return ids


def dictionary_columns(meta: pq.FileMetaData, physical: pa.Schema) -> frozenset[str]:
    """Top-level string / binary columns whose chunk in every row group starts with a small
    dictionary page (see ``_SMALL_DICTIONARY_BYTES``): cheaper to read as Arrow dictionaries."""
    wanted = {
        f.name for f in physical
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
        or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
    }
    if not wanted or meta.num_row_groups == 0:
        return frozenset()
    found = set(wanted)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        seen = set()
        for c in range(group.num_columns):
            chunk = group.column(c)
            name = chunk.path_in_schema
            if name not in wanted:
                continue
            seen.add(name)
            start = chunk.dictionary_page_offset
            small = (chunk.has_dictionary_page and start is not None and 0 < start < chunk.data_page_offset
                     and chunk.data_page_offset - start <= _SMALL_DICTIONARY_BYTES)
            if not small:
                found.discard(name)
        found &= seen
    return frozenset(found)


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows with ``schema``. ``Schema.empty_table`` fails on a uuid (an extension
    type) inside a list, map or struct (pyarrow builds it from Python values); ``nulls`` does not."""
    return pa.table([pa.nulls(0, f.type) for f in schema], schema=schema)


def small_types(typ: pa.DataType) -> pa.DataType:
    """Large Arrow string/binary/list types as their 32-bit-offset forms (DuckDB's output)."""
    if pa.types.is_large_string(typ):
        return pa.utf8()
    if pa.types.is_large_binary(typ):
        return pa.binary()
    if pa.types.is_large_list(typ) or pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(small_types(typ.value_type)))
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(small_types(f.type)) for f in typ])
    if pa.types.is_map(typ):
        return pa.map_(small_types(typ.key_type), small_types(typ.item_type))
    return typ


def _identity_part(table: pa.Table) -> SourcePart:
    names = table.schema.names
    return SourcePart(ds.dataset(table), ", ".join(quote(n) for n in names), tuple((n, n) for n in names))


def _fs_path(uri: str) -> str:
    return fs_path(uri)  # every spelling of a local file, Hadoop's file:/p included
