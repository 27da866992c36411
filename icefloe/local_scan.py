"""In-process scans: one pinned snapshot's Parquet files streamed as Arrow, without the server.

The engine's ``IcebergSources`` maps each file's columns by Iceberg field id into Arrow
datasets. A plain scan (no filter, one file layout) streams its dataset as it is: multi-threaded,
no SQL engine. A filtered one, or one over files of several layouts, runs through DuckDB.

Where the time goes (``bench_embedded``, 10M rows of id/v/s into polars): Arrow's Parquet
reader turning a dictionary-encoded string column into plain strings cost a third of the CPU of
the whole read, ten times what reading the same column as a dictionary costs. So string and
binary columns whose footers show dictionary-coded data are read as dictionaries, and the
dataset's declared plain type makes Arrow cast them back inside its scan threads (a gather of
the few distinct values): the stream's schema and values stay exactly the table's. A column
whose data pages are plain (a writer's dictionary fallback) would be hashed value by value when
read as a dictionary, five times slower than plainly, so the footer decides per column.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyiceberg.table import Table

from flight_server.engine.iceberg_source import IcebergSources, SourcePart, quote
from icefloe.backend import ScanSource
from icefloe.errors import InvalidArgument, NotFound
from icefloe.views import batch_to_views, view_type

BATCH_ROWS = 122_880  # DuckDB's natural multiple of its 2048-row vectors
# Plain scans: big batches and more files in flight read 10M rows into polars ~1.8x faster than
# the dataset defaults (bench_embedded), at the cost of more read-ahead memory.
PLAIN_BATCH_ROWS = 1 << 20
PLAIN_FRAGMENT_READAHEAD = 8
# Plain BYTE_ARRAY pages spend at least 4 bytes on every non-null value (its length); dictionary
# pages spend the index bit width. Below this many bytes a value (dictionary page included),
# most values of a column chunk are dictionary indices.
DICTIONARY_BYTES_PER_VALUE = 3.0
_NOT_DICTIONARY = {"DELTA_BYTE_ARRAY", "DELTA_LENGTH_BYTE_ARRAY", "BYTE_STREAM_SPLIT"}


class FooterCache:
    """Per data file (immutable): its top-level columns that are read faster as dictionaries."""

    def __init__(self, size: int = 65536) -> None:
        self._size = size
        self._items: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def dictionary_coded(self, path: str, filesystem: pa.fs.FileSystem) -> frozenset[str]:
        """The string/binary columns of ``path`` whose every row group is dictionary-coded."""
        with self._lock:
            found = self._items.get(path)
            if found is not None:
                self._items.move_to_end(path)
                return found
        found = _dictionary_coded(pq.read_metadata(path, filesystem=filesystem))
        with self._lock:
            self._items[path] = found
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return found


def _dictionary_coded(metadata: pq.FileMetaData) -> frozenset[str]:
    schema = metadata.schema.to_arrow_schema()
    candidates = {f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                  or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            if column.path_in_schema not in candidates:
                continue
            values = column.num_values
            stats = column.statistics if column.is_stats_set else None
            if stats is not None and stats.has_null_count:
                values -= stats.null_count
            if values > 0 and (not column.has_dictionary_page or _NOT_DICTIONARY & set(column.encodings)
                               or column.total_uncompressed_size / values >= DICTIONARY_BYTES_PER_VALUE):
                candidates.discard(column.path_in_schema)
    return frozenset(candidates)


class LocalScan(ScanSource):
    """A scan of one pinned snapshot's files."""

    def __init__(self, sources: IcebergSources, footers: FooterCache, table: Table, columns: Sequence[str] | None,
                 filter: str | None, snapshot_id: int | None) -> None:
        if snapshot_id is None:
            snapshot = table.current_snapshot()
            schema = table.schema()
        else:
            snapshot = table.snapshot_by_id(snapshot_id)
            if snapshot is None:
                raise NotFound(f"table {'.'.join(table.name())} has no snapshot {snapshot_id}")
            schema = table.schemas().get(snapshot.schema_id, table.schema()) if snapshot.schema_id is not None \
                else table.schema()
        self._parts: list[SourcePart] = sources.parts(table, snapshot.snapshot_id if snapshot else None, schema)
        self._footers = footers
        names = [f.name for f in schema.fields]
        wanted = list(columns) if columns is not None else names
        unknown = [c for c in wanted if c not in names]
        if unknown:
            raise InvalidArgument(f"table {'.'.join(table.name())} has no column(s) {unknown}")
        self._columns = wanted
        self._filter = filter
        self._schema: pa.Schema | None = None
        if filter is not None:
            self._schema = self._duckdb()[1].schema  # plan now: a bad filter fails at scan()

    @property
    def schema(self) -> pa.Schema:
        if self._schema is None:
            if self._plain():
                part = self._parts[0]
                phys_of = {name: phys for phys, name in part.columns}
                self._schema = pa.schema([part.data.schema.field(phys_of[c]).with_name(c) for c in self._columns])
            else:
                connection, reader = self._duckdb()
                self._schema = reader.schema
                connection.close()
        return self._schema

    def _plain(self) -> bool:
        # Files with row-level deletes are read through their dataset's own scanner (engine.deletes).
        return self._filter is None and len(self._parts) == 1 and not self._parts[0].has_deletes

    def open(self) -> pa.RecordBatchReader:
        # Nothing is read until the first batch is asked for: consumers such as DuckDB open a
        # stream once just for its schema, and a scanner started eagerly would read ahead.
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def open_exchange(self) -> pa.RecordBatchReader:
        """Plain scans: the dictionary-coded string/binary columns as views (``icefloe.views``)."""
        if not self._plain():
            return self.open()
        part = self._parts[0]
        phys_of = {name: phys for phys, name in part.columns}
        coded = self._dictionary_coded(part, [phys_of[c] for c in self._columns])
        if not coded:
            return self.open()
        schema = pa.schema([f.with_type(view_type(f.type) or f.type) if phys_of[c] in coded else f
                            for c, f in zip(self._columns, self.schema, strict=True)], metadata=self.schema.metadata)
        return pa.RecordBatchReader.from_batches(schema, self._batches(views=schema))

    def _batches(self, views: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
        """The rows; with ``views`` (``open_exchange``'s schema), dictionary-coded columns as views."""
        if self._plain():
            # A plain scan needs no engine: the dataset streams the files, renamed by field id.
            part = self._parts[0]
            phys_of = {name: phys for phys, name in part.columns}
            columns = {c: ds.field(phys_of[c]) for c in self._columns}
            scanner = ds.Scanner.from_dataset(
                self._dataset(part, [phys_of[c] for c in self._columns], keep_dictionaries=views is not None),
                columns=columns, batch_size=PLAIN_BATCH_ROWS, fragment_readahead=PLAIN_FRAGMENT_READAHEAD,
            )
            if views is None:
                yield from scanner.to_batches()
            else:
                for batch in scanner.to_batches():
                    yield batch_to_views(batch, views)
            return
        connection, reader = self._duckdb()
        with connection:  # the connection lives as long as its stream
            yield from reader

    def _dictionary_coded(self, part: SourcePart, physical: Sequence[str]) -> set[str]:
        """The ``physical`` columns that every file of ``part`` dictionary-codes."""
        data = part.data
        if part.partial_files or part.has_deletes or not isinstance(data, ds.FileSystemDataset) or not data.files:
            return set()
        wanted = set(physical)
        for path in data.files:
            wanted &= self._footers.dictionary_coded(path, data.filesystem)
            if not wanted:
                break
        return wanted

    def _dataset(self, part: SourcePart, physical: Sequence[str], keep_dictionaries: bool = False) -> ds.Dataset:
        """``part.data``, reading the ``physical`` columns that every file dictionary-codes as
        dictionaries: cast back to the dataset's plain types by the scan, or, with
        ``keep_dictionaries``, streamed as dictionaries."""
        wanted = self._dictionary_coded(part, physical)
        if not wanted:
            return part.data
        data = part.data
        assert isinstance(data, ds.FileSystemDataset)
        schema = data.schema
        if keep_dictionaries:
            schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in wanted else f
                                for f in schema], metadata=schema.metadata)
        # plus what the part reads as dictionaries already (columns a file stores as views)
        already = set(getattr(getattr(data.format, "read_options", None), "dictionary_columns", None) or ())
        options = ds.ParquetReadOptions(dictionary_columns=sorted(wanted | already))
        return ds.dataset(data.files, schema=schema, filesystem=data.filesystem,
                          format=ds.ParquetFileFormat(read_options=options))

    def _duckdb(self) -> tuple[duckdb.DuckDBPyConnection, pa.RecordBatchReader]:
        connection = duckdb.connect(":memory:")
        selects = []
        for i, part in enumerate(self._parts):
            connection.register(f"__icefloe_part_{i}", self._dataset(part, [phys for phys, _ in part.columns]))
            selects.append(f"SELECT {part.select_list} FROM __icefloe_part_{i}")
        sql = f"SELECT {', '.join(quote(c) for c in self._columns)} FROM ({' UNION ALL '.join(selects)})"
        if self._filter is not None:
            sql += f" WHERE ({self._filter})"
        try:
            return connection, connection.sql(sql).to_arrow_reader(BATCH_ROWS)
        except duckdb.Error as exc:
            connection.close()
            raise InvalidArgument(f"scan filter {self._filter!r}: {str(exc).splitlines()[0]}") from None
