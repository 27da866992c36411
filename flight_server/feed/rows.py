"""rows.v1: the rows each append added to one table, plus ``_seq``, ``_snapshot_id``, ``_operation``.

For every append commit the stream reads the data files that the commit's snapshot added
(manifest entries with status ADDED and that snapshot's id) and sends their rows. Every other
commit of the table (overwrite, delete, schema, rename, drop, ...) is announced as a
metadata-only message ``{"commit": {...}}`` so a consumer knows to re-read. The last batch of
each append carries the same ``{"commit": {...}}`` as its app_metadata: a ``commit`` message
always means "seq N is complete", so a consumer can move its cursor there.

The Arrow schema is the table's schema at the first append the stream sends (the schema
message goes out with those rows). If the table's schema then changes, the stream ends with
FAILED_PRECONDITION naming the seq to resume after; the new stream starts with the new schema.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _pyarrow_schema_ensure_small_types, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from catalog.commit_log import CommitRecord
from catalog.sandbox import confine
from flight_server import errors
from flight_server.feed.commit_columns import with_commit_columns
from flight_server.feed.events import metadata_message, record_matches, record_summary
from flight_server.feed.stream import FeedStream

logger = logging.getLogger("icefloe.feed.rows")

EXTRA_FIELDS = (
    pa.field("_seq", pa.int64(), nullable=False),
    pa.field("_snapshot_id", pa.int64(), nullable=False),
    pa.field("_operation", pa.utf8(), nullable=False),
)
_METADATA_CACHE_SIZE = 8


class RowsUnavailable(Exception):
    """The files or metadata holding a commit's rows are gone (expired or removed)."""


class RowStream(FeedStream):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert self.request.patterns is not None
        self.table_name = self.request.patterns[0].text
        # The Iceberg schema of the rows sent so far (None until the first append is sent).
        self._iceberg_schema: Schema | None = None
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._live_index: tuple[int, dict[int, list[DataFile]]] | None = None

    def run(self) -> None:
        # A mistyped table name should fail now rather than stream heartbeats forever.
        self.deps.catalog.load_table(self.table_name)
        super().run()

    # -- per commit --------------------------------------------------------------------------

    def handle(self, records: list[CommitRecord]) -> bool:
        sent = False
        for record in records:
            if not record_matches(self.request, record):
                continue
            if record.operation == "append" and record.snapshot_id is not None:
                self._send_append(record)
            else:
                if record.operation == "schema" and self._schema_changed_by(record):
                    self.send_metadata("commit", record_summary(record))
                    raise errors.FailedPrecondition(
                        f"the schema of {self.table_name} changed at seq {record.seq}; "
                        f"resubscribe with after={record.seq} to read rows with the new schema"
                    )
                self.send_metadata("commit", record_summary(record))
            sent = True
        return sent

    def _send_append(self, record: CommitRecord) -> None:
        assert record.snapshot_id is not None
        try:
            metadata, io = self._metadata_for(record)
            schema, files = commit_files(metadata, io, record, lambda: self._live_files(metadata, io))
            if self._iceberg_schema is not None and not _same_schema(schema, self._iceberg_schema):
                raise errors.FailedPrecondition(
                    f"the schema of {self.table_name} changed before seq {record.seq}; "
                    f"resubscribe with after={record.seq - 1} to read rows with the new schema"
                )
            target = output_schema(schema)
            pending: pa.RecordBatch | None = None
            for batch in _commit_batches(metadata, io, schema, files, target, record):
                if pending is not None:
                    self.send_batch(pending)
                pending = batch
        except (FileNotFoundError, RowsUnavailable) as exc:
            logger.info("rows of seq %d are unavailable: %s", record.seq, exc)
            raise errors.OutOfRange(
                f"the rows of seq {record.seq} are no longer available (expired or compacted away); "
                f"resubscribe with after={record.seq} to skip them"
            ) from None
        self._iceberg_schema = schema
        if pending is None:
            # An append of zero rows still completes its seq.
            self.send_metadata("commit", record_summary(record))
        else:
            self.send_batch(pending, metadata_message("commit", record_summary(record)))

    def _schema_changed_by(self, record: CommitRecord) -> bool:
        if self._iceberg_schema is None:
            return False  # nothing sent yet: the first append after this sets the schema
        try:
            metadata, _ = self._metadata_for(record)
        except (FileNotFoundError, RowsUnavailable):
            return True  # cannot tell; ending the stream is the safe answer
        return not _same_schema(metadata.schema(), self._iceberg_schema)

    def _live_files(self, metadata: TableMetadata, io: FileIO) -> dict[int, list[DataFile]]:
        """Live data files of the current snapshot, by the id of the snapshot that added them."""
        current = metadata.current_snapshot()
        key = current.snapshot_id if current is not None else 0  # the index depends only on it
        if self._live_index is not None and self._live_index[0] == key:
            return self._live_index[1]
        index = live_files_by_snapshot(metadata, io)
        self._live_index = (key, index)
        return index

    def _metadata_for(self, record: CommitRecord) -> tuple[TableMetadata, FileIO]:
        """The table metadata written by ``record``'s commit (or the table's current metadata)."""
        location = record.metadata_location
        cached = self._metadata.get(location) if location is not None else None
        if cached is not None:
            return cached, self.deps.catalog.table_io(cached.location)
        metadata, io = load_commit_metadata(self.deps.catalog, record)
        assert location is not None  # load_commit_metadata refuses a record without one
        self._metadata[location] = metadata
        while len(self._metadata) > _METADATA_CACHE_SIZE:
            self._metadata.popitem(last=False)
        return metadata, io


def _commit_batches(
    metadata: TableMetadata, io: FileIO, schema: Schema, files: list[DataFile], target: pa.Schema,
    record: CommitRecord,
) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of one append's files, with its commit columns: one Arrow dataset
    scan where ``appended_files`` reads the files exactly, else pyiceberg's reader."""
    from flight_server.appended_files import shared_reader

    reader = shared_reader()
    for data_file in files:
        confine(io, data_file.file_path)
    if reader.readable(schema, files):
        yield from reader.batches([(record, f) for f in files], schema, target)
        return
    scan = ArrowScan(metadata, io, schema, AlwaysTrue())
    # A list, not a generator: ArrowScan iterates the tasks twice.
    for batch in scan.to_record_batches([FileScanTask(f) for f in files]):
        if batch.num_rows:
            yield with_commit_columns(batch, target, record)


def load_commit_metadata(catalog: Any, record: CommitRecord) -> tuple[TableMetadata, FileIO]:
    """The table metadata ``record``'s commit wrote (or, once that file is gone, the table's
    current metadata, which still lists every snapshot not yet expired).

    Raises:
        RowsUnavailable: Neither is there (the table was dropped or replaced).
    """
    location = record.metadata_location
    if location is None:
        raise RowsUnavailable("commit has no metadata location")
    io = catalog._load_file_io(location=location)
    try:
        metadata = FromInputFile.table_metadata(io.new_input(location))
        # Its files are read through the table's own FileIO: confined to the table's folder.
        return metadata, catalog.table_io(metadata.location)
    except FileNotFoundError:
        try:
            table = catalog.load_table((*record.namespace, record.table))
        except NoSuchTableError:
            raise RowsUnavailable("table metadata removed") from None
        if str(table.metadata.table_uuid) != record.table_uuid:
            raise RowsUnavailable("table was replaced") from None
        return table.metadata, table.io


def commit_files(
    metadata: TableMetadata, io: FileIO, record: CommitRecord,
    live_files: Callable[[], dict[int, list[DataFile]]],
) -> tuple[Schema, list[DataFile]]:
    """The schema an append commit wrote with and exactly the data files it added.

    Raises:
        RowsUnavailable: Those files cannot all be found any more (rewritten or removed).
    """
    assert record.snapshot_id is not None
    snapshot = metadata.snapshot_by_id(record.snapshot_id)
    if snapshot is not None:
        schema = _snapshot_schema(metadata, snapshot)
        files = [
            data_file
            for snapshot_id in _commit_snapshot_ids(metadata, record)
            for data_file in _added_data_files(metadata, io, snapshot_id)
        ]
    else:
        # The snapshot was expired (tables keep their last N snapshots), but the files it
        # added are still live unless rewritten: their manifest entries keep the id of the
        # snapshot that added them.
        schema = metadata.schema()
        files = live_files().get(record.snapshot_id, [])
    _check_complete(record, files)
    return schema, files


def _snapshot_schema(metadata: TableMetadata, snapshot: Any) -> Schema:
    found = metadata.schema_by_id(snapshot.schema_id) if snapshot.schema_id is not None else None
    return found or metadata.schema()


def live_commit_files(
    metadata: TableMetadata, record: CommitRecord, live: dict[int, list[DataFile]]
) -> tuple[Schema, list[DataFile]] | None:
    """An append's files from the live-file index of the table's current snapshot (one pass
    over its manifests serves every commit of a range, where ``commit_files`` reads one
    manifest list per commit); None unless all of them are still live."""
    assert record.snapshot_id is not None
    snapshot = metadata.snapshot_by_id(record.snapshot_id)
    if snapshot is None:
        # Expired (as in ``commit_files``): its files keep its id in their manifest entries.
        # Answered here, a range of expired appends reads the manifests once, not once each.
        files, schema = live.get(record.snapshot_id, []), metadata.schema()
    else:
        files = [f for snapshot_id in _commit_snapshot_ids(metadata, record) for f in live.get(snapshot_id, [])]
        schema = _snapshot_schema(metadata, snapshot)
    try:
        _check_complete(record, files)
    except RowsUnavailable:
        return None
    return schema, files


def live_files_by_snapshot(metadata: TableMetadata, io: FileIO) -> dict[int, list[DataFile]]:
    """Live data files of the current snapshot, by the id of the snapshot that added them."""
    current = metadata.current_snapshot()
    index: dict[int, list[DataFile]] = {}
    if current is not None:
        for manifest in current.manifests(io):
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                if entry.data_file.content == DataFileContent.DATA and entry.snapshot_id is not None:
                    index.setdefault(entry.snapshot_id, []).append(entry.data_file)
    return index


def _check_complete(record: CommitRecord, files: list[DataFile]) -> None:
    """Refuse to send part of a commit: the files found must be exactly what it added."""
    if record.added_files is not None and len(files) != record.added_files:
        raise RowsUnavailable(f"found {len(files)} of the {record.added_files} files the commit added")
    if record.added_rows is not None and sum(f.record_count for f in files) != record.added_rows:
        raise RowsUnavailable("the commit's files were rewritten")


def _same_schema(a: Schema, b: Schema) -> bool:
    return a.as_struct() == b.as_struct()


def output_schema(schema: Schema) -> pa.Schema:
    columns = _pyarrow_schema_ensure_small_types(schema_to_pyarrow(schema, include_field_ids=False))
    clashes = [f.name for f in EXTRA_FIELDS if f.name in columns.names]
    if clashes:
        raise errors.FailedPrecondition(f"rows.v1 cannot stream a table with a column named {clashes[0]}")
    return pa.schema([*columns, *EXTRA_FIELDS])


def _commit_snapshot_ids(metadata: TableMetadata, record: CommitRecord) -> list[int]:
    """Ids of the snapshots one commit added, oldest first (a transaction can add several)."""
    assert record.snapshot_id is not None
    ids: list[int] = []
    snapshot = metadata.snapshot_by_id(record.snapshot_id)
    while snapshot is not None and snapshot.snapshot_id != record.parent_snapshot_id and len(ids) < 1000:
        ids.append(snapshot.snapshot_id)
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return ids[::-1]


def _added_data_files(metadata: TableMetadata, io: FileIO, snapshot_id: int) -> list[DataFile]:
    return [e.data_file for e in _own_entries(metadata, io, snapshot_id, ManifestEntryStatus.ADDED)
            if e.data_file.content == DataFileContent.DATA]


def _own_entries(metadata: TableMetadata, io: FileIO, snapshot_id: int, status: ManifestEntryStatus) -> list[Any]:
    """The manifest entries with ``status`` that snapshot ``snapshot_id`` itself wrote."""
    snapshot = metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    entries = []
    for manifest in snapshot.manifests(io):
        # Entries a snapshot adds or deletes live only in manifests that snapshot wrote.
        if manifest.added_snapshot_id != snapshot_id:
            continue
        if status == ManifestEntryStatus.ADDED and not manifest.has_added_files():
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=status != ManifestEntryStatus.DELETED):
            if entry.status == status and entry.snapshot_id == snapshot_id:
                entries.append(entry)
    return entries


def snapshot_operation(metadata: TableMetadata, record: CommitRecord) -> str | None:
    """The Iceberg operation (``append``, ``overwrite``, ``delete``, ``replace``) of the
    snapshot ``record`` committed, or None when that snapshot is no longer in ``metadata``."""
    snapshot = metadata.snapshot_by_id(record.snapshot_id) if record.snapshot_id is not None else None
    if snapshot is None or snapshot.summary is None:
        return None
    return str(snapshot.summary.operation.value)


def commit_changes(
    metadata: TableMetadata, io: FileIO, record: CommitRecord
) -> tuple[Schema, list[DataFile], list[DataFile]] | None:
    """The schema, added data files and removed data files of a copy-on-write commit; None
    when it wrote delete files (merge-on-read), which have no row form here.

    Raises:
        RowsUnavailable: The commit's snapshot is no longer in the metadata.
    """
    assert record.snapshot_id is not None
    snapshot = metadata.snapshot_by_id(record.snapshot_id)
    if snapshot is None:
        raise RowsUnavailable("the commit's snapshot was expired")
    schema = _snapshot_schema(metadata, snapshot)
    added: list[DataFile] = []
    removed: list[DataFile] = []
    for snapshot_id in _commit_snapshot_ids(metadata, record):
        for status, files in ((ManifestEntryStatus.ADDED, added), (ManifestEntryStatus.DELETED, removed)):
            for entry in _own_entries(metadata, io, snapshot_id, status):
                if entry.data_file.content != DataFileContent.DATA:
                    return None
                files.append(entry.data_file)
    return schema, added, removed
