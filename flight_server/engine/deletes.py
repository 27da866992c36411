"""Data files with row-level deletes as DuckDB sources.

DuckDB scans a registered ``pyarrow.dataset.Dataset`` by calling its Python ``scanner(columns=,
filter=)`` method: that is where projection and filter pushdown reach Arrow. A
``DeletedDataset`` is a dataset of the files that have deletes whose ``scanner`` streams each
file through ``catalog.delete_reads.read_with_deletes`` (a position mask per batch, equality deletes
as semi-joins) before the pushed-down projection and filter apply. It can be scanned any
number of times (a self-join, a sub-query), as a plain dataset can.

Row positions must be counted over every row of a file, so the pushed-down filter is applied
after the deletes, never inside the Parquet read; the columns it names are read as well (a
column is read when its name occurs in the filter's text: reading one too many costs time,
never correctness).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from pyiceberg.io import FileIO

from catalog.delete_reads import BoundDeletes, bind, read_with_deletes
from catalog.deletes import DeleteSets, FileDeletes

_BATCH_ROWS = 122_880
# A dataset whose schema has this column fills it with each row's position in its data file
# (merge-on-read DELETE / UPDATE: the rows to delete, named by position).
POSITION_COLUMN = "__icefloe_pos"


class DeletedFile:
    """One data file (local path for ``filesystem``), the deletes that apply to it, and the
    row groups to read (None: all)."""

    __slots__ = ("path", "uri", "deletes", "row_groups", "_bound", "_lock")

    def __init__(self, path: str, uri: str, deletes: FileDeletes, row_groups: list[int] | None) -> None:
        self.path, self.uri, self.deletes, self.row_groups = path, uri, deletes, row_groups
        self._bound: BoundDeletes | None = None
        self._lock = threading.Lock()

    def bound(self, io: FileIO, sets: DeleteSets) -> BoundDeletes:
        with self._lock:
            if self._bound is None:
                self._bound = bind(io, sets, self.deletes, self.uri)
            return self._bound


class DeletedDataset(ds.FileSystemDataset):  # type: ignore[misc]
    """A FileSystemDataset whose scans leave out deleted rows (see the module docstring)."""

    _icefloe: tuple[Any, ...]

    def scanner(self, columns: Any = None, filter: Any = None, **kwargs: Any) -> ds.Scanner:  # noqa: A002
        io, sets, files, fmt, fs, names = self._icefloe
        schema = self.schema
        wanted = list(schema.names) if columns is None else list(columns)
        if isinstance(columns, dict):
            raise TypeError("expression projections are not supported on a dataset with deletes")
        text = str(filter) if filter is not None else ""
        needed = list(dict.fromkeys([*wanted, *(n for n in schema.names if filter is not None and n in text)]))
        read_schema = pa.schema([schema.field(n) for n in needed])
        position = POSITION_COLUMN if POSITION_COLUMN in schema.names else None

        def batches() -> Iterator[pa.RecordBatch]:
            for f in files:
                yield from read_with_deletes(fmt, f.path, fs, schema, needed, f.bound(io, sets), names,
                                             f.row_groups, kwargs.get("batch_size", _BATCH_ROWS), position)

        return ds.Scanner.from_batches(batches(), schema=read_schema, columns=wanted, filter=filter,
                                       batch_size=kwargs.get("batch_size", _BATCH_ROWS))


def deleted_dataset(
    io: FileIO, sets: DeleteSets, files: list[DeletedFile], schema: pa.Schema, fmt: ds.ParquetFileFormat,
    fs: pafs.FileSystem, names: dict[int, str],
) -> DeletedDataset:
    """The dataset of ``files`` read as ``schema``; ``names``: field id -> column name in it."""
    fragments = [fmt.make_fragment(f.path, filesystem=fs) for f in files]
    dataset = DeletedDataset(fragments, schema, fmt, fs)
    dataset._icefloe = (io, sets, files, fmt, fs, names)
    return dataset
