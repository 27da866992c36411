"""Applying a data file's deletes to its rows as they are read (``catalog.deletes`` plans and
reads the deletes): a ``BoundDeletes`` masks batches of one data file, by position and by
equality keys, and the readers here stream a data file, or a planned file list, with its
deletes applied."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema

from catalog.deletes import DeleteSets, FileDeletes
from catalog.sandbox import confine

_ROW = "__icefloe_del_row"


@dataclass
class BoundDeletes:
    """The deletes of one data file, read and ready to mask batches of it."""

    positions: np.ndarray  # sorted deleted positions
    equality: list[tuple[tuple[int, ...], pa.Table]]  # (field ids, keys named str(id)), per id set
    # (field ids, key types) -> the delete keys encoded for the join (see _equality_hits)
    prepared: dict[Any, pa.Table] = field(default_factory=dict)

    def columns_needed(self, names: dict[int, str]) -> set[str]:
        return {names[i] for ids, _ in self.equality for i in ids if i in names}

    def keep(self, batch: pa.RecordBatch | pa.Table, start: int, names: dict[int, str]) -> np.ndarray | None:
        """Boolean mask of the rows of ``batch`` (rows ``start``.. of its file) that survive;
        None when all do. ``names``: field id -> column name in ``batch``."""
        n = batch.num_rows
        mask: np.ndarray | None = None
        if len(self.positions):
            lo, hi = np.searchsorted(self.positions, [start, start + n])
            if hi > lo:
                mask = np.ones(n, dtype=bool)
                mask[self.positions[lo:hi] - start] = False
        for ids, keys in self.equality:
            hits = _equality_hits(batch, ids, keys, names, self.prepared)
            if hits is not None and len(hits):
                mask = np.ones(n, dtype=bool) if mask is None else mask
                mask[hits] = False
        return mask


def bind(io: FileIO, sets: DeleteSets, deletes: FileDeletes, data_path: str) -> BoundDeletes:
    positions = sets.positions(io, deletes, data_path) if deletes.positions else np.empty(0, dtype=np.int64)
    grouped: dict[tuple[int, ...], list[pa.Table]] = {}
    for f in deletes.equality:
        ids = tuple(int(i) for i in f.equality_ids or ())
        grouped.setdefault(ids, []).append(sets.equality_keys(io, f))
    equality = []
    for ids, tables in grouped.items():
        keys = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        equality.append((ids, keys))
    return BoundDeletes(positions, equality)


def _equality_hits(
    batch: pa.RecordBatch | pa.Table, ids: tuple[int, ...], keys: pa.Table, names: dict[int, str],
    prepared: dict[Any, pa.Table],
) -> np.ndarray | None:
    """Row indices of ``batch`` whose key equals some delete key (NULL-safe).

    Each key column becomes (is-null flag, value with NULLs filled) on both sides, so the hash
    join's equality is IS NOT DISTINCT FROM. The delete side is encoded and de-duplicated once
    per key types (``prepared``), not once per batch."""
    if keys.num_rows == 0 or batch.num_rows == 0:
        return None
    left: dict[str, Any] = {}
    types = []
    for i in ids:
        column = batch.column(names[i]) if i in names else pa.nulls(batch.num_rows, keys.column(str(i)).type)
        types.append(column.type)
        left[f"n{i}"] = pc.is_null(column)
        left[f"v{i}"] = _fill_nulls(column)
    key_names = list(left)
    right = prepared.get((ids, tuple(types)))
    if right is None:
        encoded: dict[str, Any] = {}
        for i, typ in zip(ids, types, strict=True):
            other = keys.column(str(i))
            other = other.cast(typ) if other.type != typ else other
            encoded[f"n{i}"] = pc.is_null(other)
            encoded[f"v{i}"] = _fill_nulls(other)
        right = prepared[(ids, tuple(types))] = pa.table(encoded).group_by(key_names).aggregate([])
    left[_ROW] = pa.array(np.arange(batch.num_rows, dtype=np.int64))
    matched = pa.table(left).join(right, keys=key_names, join_type="left semi", use_threads=False)
    return np.asarray(matched.column(_ROW).to_numpy(), dtype=np.int64)


def _fill_nulls(values: Any) -> Any:
    """``values`` with NULLs replaced by some value of its type (the is-null flag tells them apart)."""
    if values.null_count == 0:
        return values
    typ = values.type
    for candidate in (pa.scalar(0), pa.scalar(""), pa.scalar(b""), pa.scalar(False)):
        try:
            return pc.fill_null(values, candidate.cast(typ))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
    raise ValueError(f"equality deletes on columns of type {typ} are not supported")


def file_batches(io: FileIO, data_file: DataFile, schema: Schema, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The file's rows in order (positions count from 0) as ``target`` = ``schema`` in Arrow:
    columns matched by field id, a column the file lacks read as NULLs."""
    confine(io, data_file.file_path)
    with io.new_input(data_file.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        by_id: dict[int, str] = {}
        for f in parquet.schema_arrow:
            raw = (f.metadata or {}).get(b"PARQUET:field_id")
            if raw is not None:
                by_id[int(raw)] = f.name
        if not by_id:
            names = set(parquet.schema_arrow.names)
            by_id = {f.field_id: f.name for f in schema.fields if f.name in names}
        columns = [by_id[f.field_id] for f in schema.fields if f.field_id in by_id]
        for batch in parquet.iter_batches(columns=columns, batch_size=131_072):
            arrays = []
            for f, af in zip(schema.fields, target, strict=True):
                if f.field_id in by_id:
                    arrays.append(batch.column(by_id[f.field_id]).cast(af.type))
                else:
                    arrays.append(pa.nulls(batch.num_rows, af.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=target)


def visible_batches(
    io: FileIO, sets: DeleteSets, data_file: DataFile, deletes: FileDeletes, schema: Schema, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows of ``data_file`` its ``deletes`` leave, as ``target`` (compaction, change scans)."""
    bound = bind(io, sets, deletes, data_file.file_path)
    names = {f.field_id: f.name for f in schema.fields}
    position = 0
    for batch in file_batches(io, data_file, schema, target):
        mask = bound.keep(batch, position, names)
        position += batch.num_rows
        if mask is not None:
            batch = batch.filter(pa.array(mask))
        if batch.num_rows:
            yield batch


def read_with_deletes(
    fragment_format: ds.ParquetFileFormat, path: str, filesystem: pafs.FileSystem, schema: pa.Schema,
    columns: list[str], deletes: BoundDeletes, names: dict[int, str], row_groups: Iterable[int] | None = None,
    batch_size: int = 131_072, position_column: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of ``columns`` of one data file (``schema``: the dataset schema its columns are
    read as) with the rows ``deletes`` remove left out; ``row_groups`` limits the read.

    Row positions are counted from the footer's row group sizes, so a read of some row groups
    still knows each row's position in the file. ``position_column`` (one of ``columns``, not
    in the file): filled with each row's position, for a merge-on-read DELETE / UPDATE that
    must name the rows it deletes by position.
    """
    stored = [c for c in columns if c != position_column]
    if position_column is not None and position_column in columns:
        return _with_positions(fragment_format, path, filesystem, schema, columns, stored, deletes, names,
                               row_groups, batch_size, position_column)
    return _read_with_deletes(fragment_format, path, filesystem, schema, stored, deletes, names, row_groups,
                              batch_size)


def _with_positions(
    fragment_format: ds.ParquetFileFormat, path: str, filesystem: pafs.FileSystem, schema: pa.Schema,
    columns: list[str], stored: list[str], deletes: BoundDeletes, names: dict[int, str],
    row_groups: Iterable[int] | None, batch_size: int, position_column: str,
) -> Iterator[pa.RecordBatch]:
    # The positions are those of the file as written, so they are attached before the deletes
    # mask rows out: the batches are read with a position column that the mask then filters.
    needed = list(dict.fromkeys([*stored, *sorted(deletes.columns_needed(names) - set(stored))]))
    read_schema = schema.remove(schema.get_field_index(position_column))
    for position, batch in _group_batches(path, filesystem, read_schema, needed, row_groups, batch_size):
        n = batch.num_rows
        mask = deletes.keep(batch, position, names)
        batch = batch.append_column(position_column, pa.array(np.arange(position, position + n, dtype=np.int64)))
        if mask is not None:
            batch = batch.filter(pa.array(mask))
        if batch.num_rows:
            yield batch.select(columns)


def _read_with_deletes(
    fragment_format: ds.ParquetFileFormat, path: str, filesystem: pafs.FileSystem, schema: pa.Schema,
    columns: list[str], deletes: BoundDeletes, names: dict[int, str], row_groups: Iterable[int] | None = None,
    batch_size: int = 131_072,
) -> Iterator[pa.RecordBatch]:
    needed = list(dict.fromkeys([*columns, *sorted(deletes.columns_needed(names) - set(columns))]))
    for position, batch in _group_batches(path, filesystem, schema, needed, row_groups, batch_size):
        mask = deletes.keep(batch, position, names)
        if mask is not None:
            batch = batch.filter(pa.array(mask))
        if batch.num_rows:
            yield batch.select(columns) if len(needed) != len(columns) else batch


def _group_batches(
    path: str, filesystem: pafs.FileSystem, schema: pa.Schema, needed: list[str], row_groups: Iterable[int] | None,
    batch_size: int,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(position in the file of its first row, batch of ``needed`` as ``schema`` types them),
    read synchronously on the calling thread.

    Not through a dataset scanner: these generators run on threads of Arrow's own pools (DuckDB
    pulls the outer ``Scanner.from_batches`` through a background generator), and a nested scan
    waits for threads of those pools. With as many files read at once as a pool has threads
    (a join over a table of many files), every thread waited on the others for ever.
    """
    with filesystem.open_input_file(path) as stream:
        parquet = pq.ParquetFile(stream, pre_buffer=False)
        meta = parquet.metadata
        starts = np.concatenate([[0], np.cumsum([meta.row_group(g).num_rows for g in range(meta.num_row_groups)])])
        groups = range(meta.num_row_groups) if row_groups is None else sorted(row_groups)
        present = set(parquet.schema_arrow.names)
        stored = [c for c in needed if c in present]
        target = pa.schema([schema.field(c) for c in needed])
        for group in groups:
            position = int(starts[group])
            for raw in parquet.iter_batches(batch_size=batch_size, row_groups=[group], columns=stored,
                                            use_threads=False):
                arrays = []
                for field in target:
                    if field.name in present:
                        column = raw.column(field.name)
                        arrays.append(column if column.type == field.type else column.cast(field.type))
                    else:
                        arrays.append(pa.nulls(raw.num_rows, field.type))
                yield position, pa.RecordBatch.from_arrays(arrays, schema=target)
                position += raw.num_rows
