"""The reads of SQL writes (DELETE, UPDATE, MERGE) through DuckDB's own Parquet reader.

A SQL write names the target's data files it reads (``sqlwrite.target_files``: the base
snapshot's files, pruned by partition and column bounds) and wants each row's file, as the
file's index in that list (``__icefloe_file``), and for merge-on-read each row's position in
its file (``__icefloe_pos``: the position delete it will write). Read here, the target is one
view in the query's slot: ``read_parquet`` of those files with ``file_row_number``, columns by
field id, the deletes already committed applied as anti-joins. The whole statement (``SELECT
__icefloe_file, __icefloe_pos [, new values] FROM target WHERE cond``, or MERGE's join) is
then ONE DuckDB query over every candidate file: the condition is evaluated in DuckDB's reader
(filters pushed into the scan), rows already deleted are left out in the same query, and no
row crosses into Python before it is a match.

Positions already deleted are not read from their delete files by DuckDB: they come from the
engine's cache of parsed delete files (``catalog.deletes.DeleteSets``, the one the Arrow path
uses): a file's positions that form a few runs of rows are a filter in its scan
(``deleted_rows.range_predicate``), the others one registered Arrow table of (file index,
position), which the view anti-joins. Every merge-on-read statement adds a delete file; were
the delete files the slot's to read, its file set would differ on every statement, and each
statement would pay a new DuckDB database (~15 ms of CPU) and read every footer and every
earlier delete file again. The slot may read the snapshot's data files (and equality delete
files) only, so consecutive statements reuse it, its footer cache warm (a merge-on-read
DELETE leaves the data files as they were); a slot made for an earlier snapshot whose files
are all still there serves an UPDATE's or MERGE's next statement too, the few new data files
it may not read handed to it as Arrow tables (``_slot_for``). Past ``_REGISTERED_POSITIONS``
deleted positions the Arrow path reads the target instead (its delete sets are bounded per
file).

Reads of less than ``_MIN_NATIVE_BYTES`` of data files, unless a free slot serves them
already or the files carry ``_NATIVE_DELETED_POSITIONS`` deleted positions, and
shapes the field-id mapping cannot express (and S3 tables), answer None: the caller reads
through per-file Arrow sources (``IcebergSources.file_parts``), which handle every shape.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from catalog.deletes import FileDeletes
from catalog.lru import LockedLRU
from catalog.sandbox import ConfinedFileIO
from flight_server.engine.deleted_rows import ROW_COLUMN
from flight_server.engine.deletes import POSITION_COLUMN
from flight_server.engine.iceberg_source import footer_field_ids, quote
from flight_server.engine.native_tables import (
    FILE_COLUMN,
    NativeTable,
    NativeTables,
    NotNative,
    field_id_read,
    literal,
    refusal,
    refuse_position_names,
)

logger = logging.getLogger("icefloe.engine.native")

TAG_COLUMN = "__icefloe_file"  # as in IcebergSources.file_parts and sqlwrite.target_files
# A read of fewer bytes of data files stays on the Arrow sources, whose slot (no files) every
# such read shares. Here the slot is made for the snapshot's files: a statement that changes
# the data files (UPDATE, MERGE, copy-on-write) makes the next one pay a new DuckDB database,
# about 15 ms of CPU, which DuckDB's faster reader earns back only on larger reads
# (bench_sql_writes, 1M rows / 8 MB in 10 files: server CPU per statement no lower for any
# statement, higher for clustered UPDATE, MERGE and copy-on-write DELETE; lower for copy-on-write
# rewrites of every file and for the scattered UPDATE).
_MIN_NATIVE_BYTES = 16 << 20
# ... but a smaller read is DuckDB's too when no new database is needed (a free slot for the
# same files: consecutive merge-on-read DELETEs leave the data files as they were), or when
# its files carry this many deleted positions: the Arrow sources apply them per file in
# Python (merging each file's delete sets on every read), which cost a clustered 1% DELETE of
# 10M rows (one 8 MB file, ~100k positions deleted before) 0.195 s of server CPU against
# 0.090 s read here, new database included (py-spy: numpy's unique led the profile).
_NATIVE_DELETED_POSITIONS = 65_536
# A slot made for an earlier snapshot serves a statement whose files it lacks (an UPDATE's or
# MERGE's new data files, ``_slot_for``) up to this many of them and bytes, read as Arrow tables.
_UNLISTED_FILES = 16
_UNLISTED_BYTES = 32 << 20
# At most this many positions already deleted are held as the registered table (16 bytes each).
_REGISTERED_POSITIONS = 8_000_000
# (a slot's files, the files a read took as Arrow tables beside it) already served once: a
# statement needing the same again (a scattered DELETE after an UPDATE reads the UPDATE's file
# at every statement) gets a new slot for its whole snapshot instead, which the next reuse.
_SERVED_UNLISTED: LockedLRU[tuple[frozenset[str], frozenset[str]], bool] = LockedLRU(256)
# (table uuid, data manifest paths) -> the real paths of the live data files they list.
_SNAPSHOT_FILES: LockedLRU[tuple[str, tuple[str, ...]], tuple[str, ...]] = LockedLRU(256)


def tagged_table(
    natives: NativeTables, table: Table, snapshot_id: int | None, schema: Schema, paths: Sequence[str],
    deletes: dict[str, FileDeletes], positions: bool, names: str,
    cover: Callable[[frozenset[str]], frozenset[str] | None] = lambda files: None,
) -> NativeTable | None:
    """The view of ``paths`` (data files of ``table`` at ``snapshot_id``) read as ``schema``
    with ``__icefloe_file`` (and, if ``positions``, ``__icefloe_pos``), the ``deletes`` of each
    file applied; ``names``: the prefix of the Arrow tables it registers (``<names>_deleted``,
    ``<names>_file_<i>``); ``cover``: the file set of the free slot that may read the most of
    a set of files and nothing outside it (``SlotPool.covering``). None: read through Arrow sources."""
    reason = refusal(table, schema)
    if reason is None and (not paths or snapshot_id is None):
        reason = "no files"  # the Arrow path's empty source has the columns' types
    if reason is None and snapshot_id is not None:
        try:
            return _tagged(natives, table, snapshot_id, schema, list(paths), deletes, positions, names, cover)
        except NotNative as exc:
            reason = str(exc)
    logger.debug("%s: the SQL write reads through Arrow sources: %s", table.name(), reason)
    return None


def _tagged(
    natives: NativeTables, table: Table, snapshot_id: int, schema: Schema, paths: list[str],
    deletes: dict[str, FileDeletes], positions: bool, names: str,
    cover: Callable[[frozenset[str]], frozenset[str] | None],
) -> NativeTable:
    io = table.io
    assert isinstance(io, ConfinedFileIO)  # refusal checked
    columns, schema_map, outer = field_id_read(schema)
    refuse_position_names(columns)
    real = []
    for path in paths:
        local = natives.local_path(io, path)  # the warehouse sandbox's check, cached
        if not natives.sources.footer_has_ids(path, local, schema):
            raise NotNative(f"{path} has no Parquet field ids (name-mapped files)")
        real.append(local)
    sizes = [os.path.getsize(r) for r in real]
    position_files = _position_files(paths, deletes)
    small = sum(sizes) < _MIN_NATIVE_BYTES
    if small and sum(int(f.record_count) for f in position_files.values()) < _NATIVE_DELETED_POSITIONS:
        # Unless a slot for these files is free already (known once the files are listed).
        small_reason = f"{sum(sizes)} bytes to read: less than a new slot costs (see _MIN_NATIVE_BYTES)"
    else:
        small_reason = None
    # A file whose deleted positions form a few runs of rows (clustered statements delete
    # ranges) is filtered by them in its scan (``file_row_number NOT BETWEEN ...``, cached per
    # set of delete files); the others' positions are anti-joined as a registered table, whose
    # hash build cost 4 ms per 100k positions at each read.
    filters = {}
    for i, path in enumerate(paths):
        applied = deletes.get(path, FileDeletes())
        if applied.positions:
            found_filter = natives.range_filter(io, applied, path)
            if found_filter is not None:
                filters[i] = found_filter
    joined = [i for i, path in enumerate(paths) if deletes.get(path, FileDeletes()).positions and i not in filters]
    deleted_name = f"{names}_deleted"
    deleted = _deleted_positions(natives, io, paths, deletes, joined)
    # Files with the same equality delete files are one read (most tables: all of them).
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, path in enumerate(paths):
        equality = deletes.get(path, FileDeletes()).equality
        groups.setdefault(tuple(sorted(f.file_path for f in equality)), []).append(i)
    by_equality: list[str] = []  # the equality delete files' real paths
    equality_joins = {key: natives.equality_joins(io, deletes.get(paths[indexes[0]], FileDeletes()).equality,
                                                  schema, by_equality)
                      for key, indexes in groups.items()}
    # The slot may read every data file of the snapshot, not only the ones this statement
    # reads: the next statement on other files of the table (a clustered DELETE steps through
    # them) then finds a slot made for the same set, its footers cached, instead of paying a
    # new DuckDB database. Each is a file of a snapshot the statement pins (sandbox-checked).
    wanted = frozenset([*real, *by_equality, *_snapshot_data_files(natives, table, io, snapshot_id)])
    found = cover(wanted)
    files, unlisted = _slot_for(found, wanted, real, sizes, by_equality)
    if small_reason is not None and files != found:  # no free slot serves it: a new one is dear
        raise NotNative(small_reason)
    registered = [(deleted_name, deleted)] if deleted is not None else []
    selects = []
    for key, indexes in groups.items():
        listed_here = [i for i in indexes if i not in unlisted]
        reads = []
        if listed_here:
            listed = "[" + ", ".join(literal(real[i]) for i in listed_here) + "]"
            reads.append((listed_here, f"read_parquet({listed}, schema = {schema_map}, file_row_number = true)",
                          outer))
        for i in indexes:
            if i in unlisted:
                name = f"{names}_file_{i}"
                registered.append((name, _arrow_read(real[i], columns)))
                reads.append(([i], name, _cast_outer(columns)))
        for read, source, select in reads:
            tag = _tag(read)
            items = [select, f"{tag} AS {TAG_COLUMN}"]
            if positions:
                items.append(f"d.{ROW_COLUMN} AS {POSITION_COLUMN}")
            joins = []
            if deleted is not None and set(read) & set(joined):
                joins.append(f"ANTI JOIN {deleted_name} AS pd ON pd.i = {tag} AND pd.pos = d.{ROW_COLUMN}")
            where = _position_filter(read, filters)
            selects.append(" ".join([f"SELECT {', '.join(items)} FROM {source} AS d", *joins, *equality_joins[key],
                                     *([f"WHERE {where}"] if where else [])]))
    return NativeTable(" UNION ALL ".join(selects), tuple(sorted(files)), tuple(registered))


def _position_filter(read: list[int], filters: dict[int, str]) -> str:
    """The scan filter of one read of the files at ``read`` (indexes in the statement's list)
    leaving out the positions deleted from those with a range filter (``""``: none)."""
    if len(read) == 1:
        return filters.get(read[0], "")
    # ``file_index`` counts the read's own files 0, 1, ... in the listed order.
    return " AND ".join(f"(d.{FILE_COLUMN} <> {n} OR ({filters[i]}))" for n, i in enumerate(read) if filters.get(i))


def _slot_for(
    found: frozenset[str] | None, wanted: frozenset[str], real: list[str], sizes: list[int], by_equality: list[str],
) -> tuple[frozenset[str], set[int]]:
    """The files the read's slot may read, and the indexes of the files it reads through Arrow
    tables instead (``_arrow_read``); ``found``: the files of the free slot that covers the
    most of ``wanted`` (the snapshot's), if any.

    A free slot made for an earlier snapshot of the table is reused when every file it may
    read is still in this snapshot: an UPDATE or MERGE adds a data file, so the
    next statement's snapshot is a superset of the slot's. DuckDB cannot widen a running
    database's ``allowed_paths`` (it refuses once external access is off, and the configuration
    is locked), so the data files the slot lacks are read here, sandbox-checked like every
    other path, and registered as Arrow tables; only while they are few and small, and not
    twice for the same slot and files (statements that read the same files again, such as
    scattered DELETEs, are cheaper in a slot of their own): otherwise a new slot for the whole
    snapshot is made, and becomes the one later statements reuse.
    """
    if found is None or found == wanted:
        return wanted, set()
    unlisted = {i for i, r in enumerate(real) if r not in found}
    if (not set(by_equality) <= found or len(unlisted) > _UNLISTED_FILES
            or sum(sizes[i] for i in unlisted) > _UNLISTED_BYTES):
        return wanted, set()
    if unlisted:
        key = (found, frozenset(real[i] for i in unlisted))
        if _SERVED_UNLISTED.get(key) is not None:  # the second time: a slot for all is cheaper
            return wanted, set()
        _SERVED_UNLISTED.put(key, True)
    return found, unlisted


def _arrow_read(local: str, columns: list[tuple[int, str, str]]) -> pa.Table:
    """A data file as the read schema's columns (matched by field id; a column the file lacks
    is NULL) and its row positions (``file_row_number``, as ``read_parquet`` names them)."""
    parquet = pq.ParquetFile(local)
    by_id = footer_field_ids(parquet.schema_arrow)
    data = parquet.read(columns=[by_id[fid] for fid, _, _ in columns if fid in by_id], use_threads=False)
    arrays = [data.column(by_id[fid]) if fid in by_id else pa.nulls(data.num_rows) for fid, _, _ in columns]
    arrays.append(pa.array(np.arange(data.num_rows, dtype=np.int64)))
    return pa.table(arrays, names=[*(name for _, name, _ in columns), ROW_COLUMN])


def _cast_outer(columns: list[tuple[int, str, str]]) -> str:
    """The select list of an Arrow-read file (alias ``d``): each column cast to the type
    ``read_parquet``'s schema map gives it, so both kinds of read union to one type."""
    return ", ".join(f"CAST(d.{quote(name)} AS {typ}) AS {quote(name)}" for _, name, typ in columns)


def _snapshot_data_files(natives: NativeTables, table: Table, io: ConfinedFileIO, snapshot_id: int) -> tuple[str, ...]:
    """The real paths of the snapshot's live data files, sandbox-checked. Cached by the data
    manifests that list them: a merge-on-read DELETE's snapshot carries its parent's data
    manifests, so the next statement finds them without planning the snapshot again."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise NotNative(f"snapshot {snapshot_id} is not in the table's metadata")
    manifests = [m for m in snapshot.manifests(io) if m.content == ManifestContent.DATA]
    key = (str(table.metadata.table_uuid), tuple(m.manifest_path for m in manifests))
    cached = _SNAPSHOT_FILES.get(key)
    if cached is None:
        cached = tuple(natives.local_path(io, entry.data_file.file_path) for m in manifests
                       for entry in m.fetch_manifest_entry(io, discard_deleted=True))
        _SNAPSHOT_FILES.put(key, cached)
    return cached


def _deleted_positions(
    natives: NativeTables, io: ConfinedFileIO, paths: list[str], deletes: dict[str, FileDeletes], joined: list[int],
) -> pa.Table | None:
    """(i: file index, pos) of every position already deleted from the files at ``joined``
    (the files whose deletes are anti-joined), or None."""
    if not joined:
        return None
    applying = _position_files([paths[i] for i in joined], deletes)
    if sum(int(f.record_count) for f in applying.values()) > _REGISTERED_POSITIONS:
        raise NotNative(f"more than {_REGISTERED_POSITIONS} positions deleted already")
    indexes, found = [], []
    for i in joined:
        # Cached per delete file (deletion vectors as well); not merged into one sorted set.
        gone = natives.positions_of(io, deletes[paths[i]], paths[i])
        indexes.append(np.full(len(gone), i, dtype=np.int64))
        found.append(gone)
    return pa.table({"i": np.concatenate(indexes), "pos": np.concatenate(found).astype(np.int64, copy=False)})


def _position_files(paths: list[str], deletes: dict[str, FileDeletes]) -> dict[str, DataFile]:
    """The position delete files (and deletion vectors) that apply to the files, by path."""
    return {f.file_path: f for p in paths for f in deletes.get(p, FileDeletes()).positions}


def _tag(indexes: list[int]) -> str:
    """Each row's file as its index in the statement's file list, for one ``read_parquet`` of
    the files at ``indexes`` (whose own ``file_index`` counts 0, 1, ... in that order)."""
    if len(indexes) == 1:
        return f"CAST({indexes[0]} AS BIGINT)"
    if indexes == list(range(indexes[0], indexes[0] + len(indexes))):
        return f"CAST(d.{FILE_COLUMN} AS BIGINT) + {indexes[0]}"
    listed = ", ".join(str(i) for i in indexes)
    return f"CAST([{listed}][CAST(d.{FILE_COLUMN} AS BIGINT) + 1] AS BIGINT)"

