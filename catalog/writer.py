"""Streaming Parquet writer: record batches in, fsync'd Iceberg ``DataFile``s out.

Batches are conformed to the table's schema (field ids, promotions, null-filled missing
columns) and encoded as they arrive, in a background thread so that decoding the network
stream and encoding Parquet overlap. Rows are buffered only up to one row group
(``write.parquet.row-group-limit`` rows or ``write.parquet.row-group-size-bytes``; see
``parquet_layout`` for icefloe's defaults), and files are rolled when
their on-disk size reaches ``write.target-file-size-bytes``, so memory stays bounded whatever
the stream length.

pyarrow encodes a row group on one core, and a bulk append spent most of its time waiting
for that core while the others idled. A stream longer than one row group is therefore
encoded by ``ENCODERS`` lanes at once, row groups dealt to them in turn, each lane writing
files of its own (so a long stream's rows come back from a scan lane by lane, not in arrival
order: Iceberg promises no row order). A stream of one row group is one file, as before.

Every file is fsync'd (file and folder) before ``finish`` returns: the catalog may then move
the table pointer to metadata that references them. ``abort`` deletes what was written.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import (
    _dataframe_to_data_files,
    _get_parquet_writer_kwargs,
    _to_requested_schema,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.utils.properties import property_as_int

from catalog.arrow_types import aligned, plain_schema, to_plain
from catalog.durable_io import background_fsync, fsync_all, local_path, local_paths
from catalog.lru import LockedLRU
from catalog.object_store import ObjectStoreTimeout, storage_failure, within
from catalog.object_writes import close_deadline_s
from catalog.sandbox import OutsideTableError, confine
from catalog.schema_policy import check_required, schema_text, strip_field_ids

logger = logging.getLogger("icefloe.catalog.writer")

# Defaults where a table sets no property (``parquet_layout``). Measured with DuckDB in
# process over TPC-H SF1 (docs/benchmarks-analytic.md): ZSTD cost about a sixth more CPU to
# read than Snappy, and 1M-row groups left a 150k-row table one row group, which one thread
# scans; Snappy with row groups of about 16 MiB of Arrow data (some 5 MiB on disk, about
# what DuckDB and tpchgen write) read fastest.
DEFAULT_COMPRESSION = "snappy"
DEFAULT_ROW_GROUP_BYTES = 16 * 1024 * 1024
_QUEUE_DEPTH = 4
_DONE = object()
# Row groups encoded at once by a long stream (each lane holds at most two: one being
# encoded, one waiting).
ENCODERS = max(1, min(2, os.cpu_count() or 1))


def _raise_refusal(error: BaseException | None) -> None:
    # A file the sandbox refused is the client's doing (a table folder that leads outside),
    # not a writer failure: it reaches the client as itself (PERMISSION_DENIED).
    if isinstance(error, OutsideTableError):
        raise OutsideTableError(str(error)) from None


class WriteAborted(RuntimeError):
    """The writer was aborted or failed; nothing it wrote may be committed."""


@dataclass(frozen=True)
class _Layout:
    """Everything about writing one input schema into one table schema (cached: appends of
    the same shape to the same table are the common case, and deriving this costs more
    than encoding a 100-row batch)."""

    file_schema: Schema
    input_schema: pa.Schema
    downcast: bool
    input_iceberg: Schema
    target_arrow: pa.Schema
    fast_schema: pa.Schema | None
    views: bool  # the input has view layouts: batches are cast to ``input_schema`` (plain) first
    stats_plan: dict[int, Any]
    column_mapping: dict[str, int]


_LAYOUT_CACHE_SIZE = 256
_layouts: LockedLRU[tuple[Any, ...], _Layout] = LockedLRU(_LAYOUT_CACHE_SIZE)


def _layout(metadata: TableMetadata, input_schema: pa.Schema) -> _Layout:
    key = (
        str(metadata.table_uuid),
        # not just the schema id: an append that evolves the schema writes against a staged
        # schema whose id another staged evolution may share
        schema_text(metadata.schema()),
        metadata.format_version,
        tuple(sorted(metadata.properties.items())),
        input_schema,
    )
    found = _layouts.get(key)
    if found is not None:
        return found
    table_schema = metadata.schema()
    sanitized = sanitize_column_names(table_schema)
    file_schema: Schema = sanitized if sanitized != table_schema else table_schema
    # View layouts (string_view, ...) are written as plain ones (catalog.arrow_types).
    given = strip_field_ids(input_schema)
    stripped = plain_schema(given)
    downcast = metadata.format_version < 3
    input_iceberg = pyarrow_to_schema(
        stripped,
        name_mapping=table_schema.name_mapping,
        downcast_ns_timestamp_to_us=downcast,
        format_version=metadata.format_version,
    )
    # Fast path: the input already has the table's columns, order, types and nullability,
    # so conforming is just attaching field ids to the input's own (zero-copy) columns.
    fast_schema: pa.Schema | None = None
    if input_iceberg.as_struct() == file_schema.as_struct():
        fast_schema = pa.schema(
            [
                pa.field(f.name, f.type, f.nullable, metadata={b"PARQUET:field_id": str(ice.field_id).encode()})
                for f, ice in zip(stripped, file_schema.fields, strict=True)
            ]
        )
    layout = _Layout(
        file_schema=file_schema,
        input_schema=stripped,
        downcast=downcast,
        input_iceberg=input_iceberg,
        target_arrow=schema_to_pyarrow(file_schema, include_field_ids=True),
        fast_schema=fast_schema,
        views=stripped is not given,
        stats_plan=compute_statistics_plan(file_schema, metadata.properties),
        column_mapping=parquet_path_to_id_mapping(file_schema),
    )
    _layouts.put(key, layout)
    return layout


class _RollingFile:
    """One open Parquet file under the table's data folder."""

    def __init__(self, path: str, io: FileIO, schema: pa.Schema, writer_kwargs: dict[str, Any]) -> None:
        self.path = path
        self.local_path = local_path(path)
        confine(io, path)  # before any folder is made: the table's folder only (catalog.sandbox)
        if self.local_path is not None:
            os.makedirs(os.path.dirname(self.local_path), exist_ok=True)
            self._stream: Any = pa.OSFile(self.local_path, "wb")  # native stream: no GIL per write
        else:
            # An object store's stream closes within a deadline (catalog.object_writes); the
            # Parquet writer writes to the native stream under it.
            self._closer = io.new_output(path).create(overwrite=False)
            self._stream = getattr(self._closer, "raw", self._closer)
        self.writer = pq.ParquetWriter(self._stream, schema=schema, store_decimal_as_integer=True, **writer_kwargs)
        self._writeback: Future[None] | None = None
        # On an object store a write can wait on the store (the multipart upload is created
        # once the first part is full; the footer's flush): each waits at most this long
        # (pyarrow bounds no request on Linux), then the file is given up (``_stuck``).
        self._deadline_s = None if self.local_path is not None else close_deadline_s(io.properties)
        self._stuck = False

    def _bounded(self, call: Callable[[], Any]) -> Any:
        if self._deadline_s is None:
            return call()
        if self._stuck:
            raise ObjectStoreTimeout("an earlier write to this object got no answer")
        try:
            return within(self._deadline_s, call, "object-store-write")
        except ObjectStoreTimeout:
            self._stuck = True  # the abandoned call still holds the writer: never touch it again
            raise

    def write_table(self, table: pa.Table, row_group_size: int) -> None:
        self._bounded(lambda: self.writer.write_table(table, row_group_size=row_group_size))

    def size(self) -> int:
        return int(self._stream.tell())

    def start_writeback(self) -> None:
        """Start flushing what is written so far to disk in the background (one flush at a
        time), so that the fsync before the commit finds little left to write: a bulk
        append's file is hundreds of MB, and flushing it all at the end took a tenth of the
        append. Not a durability step (the commit's fsync is), only an early start."""
        if self.local_path is None or (self._writeback is not None and not self._writeback.done()):
            return
        self._stream.flush()
        self._writeback = background_fsync(self.local_path)

    def close(self) -> tuple[pq.FileMetaData, int]:
        self._bounded(self.writer.close)
        size = self.size()
        (self._closer if self.local_path is None else self._stream).close()
        return self.writer.writer.metadata, size


class DataFileWriter:
    """Writes one append's stream into Parquet data files of a table.

    Args:
        metadata: The table metadata to write against (after any schema evolution).
        io: The table's FileIO.
        input_schema: Schema of the incoming batches (field metadata ignored).
        required_columns: Table columns that must hold no nulls.
    """

    def __init__(
        self, metadata: TableMetadata, io: FileIO, input_schema: pa.Schema, required_columns: list[str] | None = None
    ) -> None:
        self._metadata = metadata
        self._io = io
        self._required = list(required_columns or [])
        props = metadata.properties
        layout = _layout(metadata, input_schema)
        self._file_schema = layout.file_schema
        self._input_schema = layout.input_schema
        self._downcast = layout.downcast
        self._input_iceberg = layout.input_iceberg
        self._target_arrow = layout.target_arrow
        self._fast_schema = layout.fast_schema
        self._views = layout.views
        self._stats_plan = layout.stats_plan
        self._column_mapping = layout.column_mapping
        self._format_model = FileFormatFactory.get(FileFormat.PARQUET)
        self._writer_kwargs, self._row_group_rows, self._row_group_bytes = parquet_layout(props)
        self._target_size = int(
            property_as_int(
                props,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
            )
            or TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
        )
        self._locations = load_location_provider(metadata.location, props)
        self._partitioned = not metadata.spec().is_unpartitioned()
        self._write_id = uuid.uuid4()
        self._file_counter = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffer_rows = 0
        self._buffer_bytes = 0
        self._lanes: list[_Lane] = []  # made at the first row group
        self._next_lane = 0
        self._files_lock = threading.Lock()  # lanes open files concurrently
        self._written_paths: list[str] = []
        self._data_files: list[DataFile] = []
        self.rows = 0
        self._error: BaseException | None = None
        self._closed = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_DEPTH)
        # Small streams (one row group) are encoded in the caller's thread at finish();
        # the encoder thread starts only once a stream outgrows one row group.
        self._thread: threading.Thread | None = None

    # -- producer side (the caller's thread) -------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """Queue one batch for encoding (blocks when the encoder is behind: back-pressure).

        Raises:
            SchemaMismatchError: A required column holds nulls.
            WriteAborted: The encoder failed earlier.
        """
        if self._error is not None:
            _raise_refusal(self._error)
            raise WriteAborted("the data file writer failed") from self._error
        if batch.num_rows == 0:
            return
        check_required(batch, self._required)
        self.rows += batch.num_rows
        if self._thread is None:
            if (self._buffer_rows + batch.num_rows < self._row_group_rows
                    and self._buffer_bytes < self._row_group_bytes):
                self._add(batch)
                return
            self._thread = threading.Thread(target=self._run, name="icefloe-parquet-writer", daemon=True)
            self._thread.start()
        self._queue.put(batch)

    def finish(self, sync: bool = True) -> list[DataFile]:
        """Flush and close every file (and fsync them unless ``sync`` is false: then the
        caller must before committing); return their ``DataFile``s (empty for no rows)."""
        if self._thread is None:
            self._queue.put(_DONE)
            self._run()  # no encoder thread: flush in this thread
        else:
            self._queue.put(_DONE)
            self._thread.join()
        self._closed = True
        if self._error is not None:
            self.abort()
            _raise_refusal(self._error)
            raise WriteAborted("the data file writer failed") from self._error
        if sync:
            fsync_all(local_paths(self._written_paths))
        return list(self._data_files)

    def abort(self) -> None:
        """Stop and delete every file this writer created (best effort)."""
        if not self._closed:
            self._error = self._error or WriteAborted("aborted")
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._queue.put(_DONE)
            if self._thread is not None:
                self._thread.join()
            else:
                self._run()
            self._closed = True
        delete_files(self._io, self._written_paths)
        self._written_paths = []
        self._data_files = []

    @property
    def written_paths(self) -> list[str]:
        return list(self._written_paths)

    # -- encoder thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    break
                if self._error is not None:
                    continue  # drain after a failure
                self._add(item)
            if self._error is None:
                self._flush_row_group(last=True)
        except BaseException as exc:  # reported to the producer by write()/finish()
            self._error = exc
        # Every lane finishes (or, after a failure, discards) its open file before the
        # writer reports back, so finish() and abort() see every path it created.
        for lane in self._lanes:
            lane.close()
            self._error = self._error or lane.error
        if self._error is None:
            self._data_files.extend(f for _, f in sorted((f for lane in self._lanes for f in lane.files), key=_first))
        else:
            # Unblock a producer waiting on a full queue.
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self._views:
            batch = to_plain(batch)
        if self._fast_schema is not None:
            return pa.RecordBatch.from_arrays(batch.columns, schema=self._fast_schema)
        return _to_requested_schema(
            requested_schema=self._file_schema,
            file_schema=self._input_iceberg,
            batch=pa.RecordBatch.from_arrays(batch.columns, schema=self._input_schema),
            downcast_ns_timestamp_to_us=self._downcast,
            include_field_ids=True,
            format_model=self._format_model,
        )

    def _add(self, batch: pa.RecordBatch) -> None:
        conformed = self._conform(batch)
        self._buffer.append(conformed)
        self._buffer_rows += conformed.num_rows
        self._buffer_bytes += conformed.nbytes
        if self._buffer_rows >= self._row_group_rows or self._buffer_bytes >= self._row_group_bytes:
            self._flush_row_group()

    def _flush_row_group(self, last: bool = False) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer)
        self._buffer, self._buffer_rows, self._buffer_bytes = [], 0, 0
        if self._partitioned:
            self._write_partitioned(table)
            return
        if not self._lanes:
            # Only a stream that outgrew one row group runs the encoder thread: it gets lanes
            # of their own; otherwise this is the stream's only row group, encoded right here.
            threaded = self._thread is not None and ENCODERS > 1
            self._lanes = [_Lane(self, threaded) for _ in range(ENCODERS if threaded else 1)]
        lane = self._lanes[self._next_lane]
        self._next_lane = (self._next_lane + 1) % len(self._lanes)
        lane.submit(table, last)

    def _open_file(self, schema: pa.Schema) -> tuple[int, _RollingFile]:
        """A new data file for a lane: its number (file order) and the open file."""
        with self._files_lock:
            self._file_counter += 1
            number = self._file_counter
            name = f"{self._write_id}-{number:05d}.parquet"
            path = self._locations.new_data_location(data_file_name=name)
            self._written_paths.append(path)
        return number, _RollingFile(path, self._io, schema, self._writer_kwargs)

    def _data_file(self, current: _RollingFile) -> DataFile:
        """Close ``current`` and describe it."""
        parquet_metadata, size = current.close()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet_metadata,
            stats_columns=self._stats_plan,
            parquet_column_mapping=self._column_mapping,
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=current.path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            file_size_in_bytes=size,
            sort_order_id=None,
            spec_id=self._metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    def _write_partitioned(self, table: pa.Table) -> None:
        # Partitioned tables: pyiceberg splits one row group's worth of rows by partition.
        # Its writer goes through the table FileIO, which fsyncs local files on close.
        files = list(_dataframe_to_data_files(self._metadata, aligned(table), self._io, write_uuid=uuid.uuid4()))
        self._written_paths.extend(f.file_path for f in files)
        self._data_files.extend(files)


def parquet_layout(props: dict[str, str]) -> tuple[dict[str, Any], int, int]:
    """pyarrow's writer options, the row group's row limit and its byte limit for a table's
    properties, with Iceberg's names: ``write.parquet.compression-codec`` (and ``-level``),
    ``write.parquet.row-group-limit`` (rows) and ``write.parquet.row-group-size-bytes``. The
    byte limit is counted on the Arrow data buffered for the row group, before encoding
    (the encoded group is smaller, typically by 2-4x)."""
    kwargs = _get_parquet_writer_kwargs({
        TableProperties.PARQUET_COMPRESSION: DEFAULT_COMPRESSION,
        # honoured here, not by pyiceberg (which warns that it is not implemented)
        **{k: v for k, v in props.items() if k != TableProperties.PARQUET_ROW_GROUP_SIZE_BYTES},
    })
    # The page index (each page's min/max and offset, as Iceberg's Java writer writes it):
    # a filter on a sorted key then reads the pages that may hold it, not the whole row group.
    # A point lookup in a 1M-row table (two row groups) took DuckDB 23-33 ms without it and
    # 4-17 ms with it; scans are unchanged (docs/benchmarks-analytic.md).
    kwargs["write_page_index"] = True
    rows = property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT, None)
    size = property_as_int(props, TableProperties.PARQUET_ROW_GROUP_SIZE_BYTES, None)
    return (kwargs, rows if rows and rows > 0 else TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
            size if size and size > 0 else DEFAULT_ROW_GROUP_BYTES)


def _first(item: tuple[int, DataFile]) -> int:
    return item[0]


class _Lane:
    """Encodes row groups into rolling files of its own, in its own thread or the caller's."""

    def __init__(self, owner: DataFileWriter, threaded: bool) -> None:
        self._owner = owner
        self._current: tuple[int, _RollingFile] | None = None
        self.files: list[tuple[int, DataFile]] = []  # (file number, file) of closed files
        self.error: BaseException | None = None
        self._queue: queue.Queue[Any] | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._queue = queue.Queue(maxsize=1)
            self._thread = threading.Thread(target=self._run, name="icefloe-parquet-encoder", daemon=True)
            self._thread.start()

    def submit(self, table: pa.Table, last: bool) -> None:
        """Encode ``table`` as the next row group (blocks while the lane is behind)."""
        if self._queue is None:
            self._write(table, last)
            return
        if self.error is not None:
            _raise_refusal(self.error)
            raise WriteAborted("a Parquet encoder failed") from self.error
        self._queue.put((table, last))

    def close(self) -> None:
        """Finish the open file (discard it after any failure); wait for the thread."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(_DONE)
            self._thread.join()
        else:
            self._finish()

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            if item is _DONE:
                break
            if self.error is None and self._owner._error is None:
                try:
                    self._write(*item)
                except BaseException as exc:  # reported through the owner
                    self.error = exc
        self._finish()

    def _write(self, table: pa.Table, last: bool) -> None:
        if self._current is None:
            self._current = self._owner._open_file(table.schema)
        current = self._current[1]
        current.write_table(table, row_group_size=self._owner._row_group_rows)
        if not last:  # the last row group is flushed by the commit's fsync, with the footer
            current.start_writeback()
        if current.size() >= self._owner._target_size:
            self._close_file()

    def _close_file(self) -> None:
        if self._current is not None:
            (number, current), self._current = self._current, None
            self.files.append((number, self._owner._data_file(current)))

    def _finish(self) -> None:
        if self.error is None and self._owner._error is None:
            try:
                self._close_file()
            except BaseException as exc:
                self.error = exc
        if self._current is not None:  # failed: the file is deleted with the others
            try:
                self._current[1].close()
            except Exception:
                pass
            self._current = None


def delete_files(io: FileIO, paths: list[str]) -> None:
    """Delete files best effort (maintenance's orphan removal catches what is left)."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            failure = storage_failure(exc)
            if failure is not None:  # the store is down: expected after a failed PUT, no traceback
                logger.warning("could not delete an unreferenced data file (%s); orphan removal will", failure)
            else:
                logger.warning("could not delete an unreferenced data file; orphan removal will", exc_info=True)
