"""Data files read with each row's position, by DuckDB's native Parquet reader (SQL writes).

A merge-on-read DELETE / UPDATE names the rows it deletes by (file, position). Counting
positions in Python (``engine.deletes.DeletedDataset``: every batch of every row group read
by Arrow on one thread, positions attached with numpy) was most of such a statement's time.
Here each data file is a ``PositionDataset`` whose ``scanner`` runs, in the engine's internal
DuckDB database (``scans.ScanPaths.native``: file access, only SQL icefloe writes), one
``read_parquet(path, file_row_number = true)`` of just the columns the query asks for; the
sandboxed DuckDB that runs the statement's condition scans it as any registered dataset.

The positions deleted already (position delete files and deletion vectors, read once per
delete file and cached: ``catalog.deletes.DeleteSets``) become one boolean array over the
file's rows that masks each batch by a gather (no merge of the delete files' arrays, no
search), so no row is seen twice and counts stay exact. Files with equality deletes,
files outside the local file system and column types whose DuckDB reading differs from
Arrow's keep the ``DeletedDataset`` path (``usable``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from catalog.deletes import FileDeletes
from flight_server.engine.deletes import POSITION_COLUMN

_BATCH_ROWS = 122_880
# Iceberg types DuckDB's Parquet reader returns as Arrow types that cast exactly to the
# dataset's (``schema_to_pyarrow``); others (uuid, fixed, time, nanosecond timestamps, nested
# types) keep the Arrow reader.
_NATIVE_TYPES = (BooleanType, IntegerType, LongType, FloatType, DoubleType, DecimalType, DateType, StringType,
                 BinaryType, TimestampType, TimestamptzType)


def usable(fs: pafs.FileSystem, deletes: FileDeletes, schema: Schema) -> bool:
    """Whether a file can be read here: local, no equality deletes, plain column types."""
    return (isinstance(fs, pafs.LocalFileSystem) and not deletes.equality
            and all(isinstance(f.field_type, _NATIVE_TYPES) for f in schema.fields))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PositionDataset(ds.FileSystemDataset):  # type: ignore[misc]
    """One data file, its columns named as ``schema`` (physical names, ``POSITION_COLUMN``
    last), read natively with positions and its deleted rows left out."""

    _icefloe: tuple[Any, ...]

    def scanner(self, columns: Any = None, filter: Any = None, **kwargs: Any) -> ds.Scanner:  # noqa: A002
        native, path, present, dead = self._icefloe
        schema = self.schema
        if isinstance(columns, dict):
            raise TypeError("expression projections are not supported on a position dataset")
        wanted = list(schema.names) if columns is None else list(columns)
        text = str(filter) if filter is not None else ""
        # The filter applies after the read (Scanner.from_batches): the columns it names are read.
        needed = list(dict.fromkeys([*wanted, *(n for n in schema.names if filter is not None and n in text)]))
        if (len(dead) or not needed) and POSITION_COLUMN not in needed:
            needed.append(POSITION_COLUMN)  # to mask the rows deleted already (or count rows)
        read_schema = pa.schema([schema.field(n) for n in needed])
        select = []
        for name in needed:
            if name == POSITION_COLUMN:
                select.append(f"file_row_number AS {_quote(name)}")
            elif name in present:
                select.append(f"{_quote(name)}")
            else:
                select.append(f"NULL AS {_quote(name)}")  # a column the file lacks: typed by the cast below
        literal = "'" + path.replace("'", "''") + "'"
        sql = f"SELECT {', '.join(select)} FROM read_parquet({literal}, file_row_number = true)"
        batch_size = kwargs.get("batch_size", _BATCH_ROWS)

        def batches() -> Iterator[pa.RecordBatch]:
            cursor = native.cursor()
            try:
                reader = cursor.sql(sql).to_arrow_reader(batch_size)
                for raw in reader:
                    batch = _conform(raw, read_schema)
                    if len(dead):
                        batch = _without(batch, dead)
                    if batch.num_rows:
                        yield batch
            except duckdb.Error as exc:
                raise OSError(f"reading {path}: {exc}") from None
            finally:
                cursor.close()

        return ds.Scanner.from_batches(batches(), schema=read_schema, columns=wanted, filter=filter,
                                       batch_size=batch_size)


def _conform(raw: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if raw.schema.equals(schema):
        return raw
    arrays = [column if column.type == field.type else column.cast(field.type)
              for column, field in zip(raw.columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _without(batch: pa.RecordBatch, dead: np.ndarray) -> pa.RecordBatch:
    """``batch`` less the rows whose position ``dead`` marks (``dead[pos]`` is True)."""
    pos = batch.column(POSITION_COLUMN).to_numpy()
    # A position past the last deleted one is live (the array ends at the last deleted one).
    hit = dead[np.minimum(pos, len(dead) - 1)] & (pos < len(dead))
    return batch.filter(pa.array(~hit)) if hit.any() else batch


def _dead_rows(deleted: list[np.ndarray]) -> np.ndarray:
    """True at every position some array of ``deleted`` names (empty when none does)."""
    arrays = [a for a in deleted if len(a)]
    if not arrays:
        return np.zeros(0, dtype=bool)
    dead = np.zeros(max(int(a[-1]) for a in arrays) + 1, dtype=bool)
    for a in arrays:
        dead[a] = True
    return dead


def position_dataset(
    native: duckdb.DuckDBPyConnection, path: str, fs: pafs.FileSystem, fmt: ds.ParquetFileFormat,
    schema: pa.Schema, present: set[str], deleted: list[np.ndarray],
) -> PositionDataset:
    """The dataset of the local file ``path`` read as ``schema`` (physical names of
    ``present`` columns, stand-ins for the others, ``POSITION_COLUMN``); ``deleted``: its
    positions deleted already, one sorted array per delete file."""
    dataset = PositionDataset([fmt.make_fragment(path, filesystem=fs)], schema, fmt, fs)
    dataset._icefloe = (native, path, present, _dead_rows(deleted))
    return dataset
