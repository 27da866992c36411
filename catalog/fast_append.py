"""An Iceberg fast append whose manifest and manifest list are written without pyiceberg's
snapshot producer, each as one write of bytes encoded in memory.

A small append's commit is CPU-bound (CPU time ~ wall time, in-process, 100-row appends), and
pyiceberg's ``_FastAppendFiles`` spent about 4 of its ~11 ms: it hands the new manifest, the
(empty) delete manifests and the carried manifests to three executor threads and waits for
each, and every file goes through a pyarrow output stream (open, small writes, close). Here
the same pyiceberg writers (``write_manifest``, ``write_manifest_list``: the same Avro
encoding, headers, codecs and the caches of ``avro_cache`` and ``manifest_list_cache``) encode
into memory on the committing thread, and each file lands with one ``write`` whose fsync
starts at once in the background (``PendingSync``); the commit waits for it with the others
before its RocksDB batch. The snapshot, summary, ref update and requirement are the ones
pyiceberg's producer makes for a fast append to ``main``.

Only plain appends of format v1/v2 tables take this path (``supported``); schema-evolving
appends, overwrites and v3 tables (row lineage) keep pyiceberg's producer.
"""

from __future__ import annotations

import errno
import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO, InputFile, OutputFile, OutputStream
from pyiceberg.manifest import (
    DataFile,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from catalog import manifest_list_cache, table_files
from catalog.durable_io import PendingSync, write_new
from catalog.lru import LockedLRU


@dataclass
class FastAppend:
    """The catalog change of one fast append, and the files it wrote for it."""

    updates: tuple[TableUpdate, ...]
    requirements: tuple[TableRequirement, ...]
    written: list[str] = field(default_factory=list)  # locations, for clean-up if the commit fails
    syncing: PendingSync = field(default_factory=PendingSync)  # local paths whose fsync has started


def supported(table: Table) -> bool:
    """Whether ``append`` can write this table's snapshot (else use pyiceberg's producer)."""
    metadata = table.metadata
    return metadata.format_version in (1, 2) and (MAIN_BRANCH not in metadata.refs
                                                  or metadata.refs[MAIN_BRANCH].snapshot_ref_type
                                                  == SnapshotRefType.BRANCH)


def append(table: Table, data_files: Sequence[DataFile], snapshot_properties: dict[str, str]) -> FastAppend:
    """Write the manifest and manifest list of a fast append of ``data_files`` to ``main``.

    Returns:
        The updates and requirements to commit; the files written (not yet known durable:
        the caller waits for ``syncing`` before it lands the commit).

    Raises:
        ValueError: No data files, or a table ``supported`` refuses.
        OSError: A file could not be written (what was written is removed).
    """
    if not data_files:
        raise ValueError("a fast append needs at least one data file")
    if not supported(table):
        raise ValueError("this table's appends go through pyiceberg's snapshot producer")
    metadata = table.metadata
    version = metadata.format_version
    schema, spec = metadata.schema(), metadata.spec()
    # Checked by the Avro writer (an unknown codec raises before anything is written).
    codec = cast(AvroCompressionCodec, metadata.properties.get(TableProperties.WRITE_AVRO_COMPRESSION,
                                                               TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT))
    snapshot_id = metadata.new_snapshot_id()
    parent = metadata.snapshot_by_name(MAIN_BRANCH)
    parent_id = parent.snapshot_id if parent is not None else None
    sequence_number = metadata.next_sequence_number()
    commit_uuid = uuid.uuid4()
    locations = table.location_provider()
    result = FastAppend(
        updates=(),
        requirements=(AssertRefSnapshotId(snapshot_id=parent_id, ref=MAIN_BRANCH),),  # type: ignore[call-arg]
    )
    try:
        manifest_out = BufferedOutput(locations.new_metadata_location(f"{commit_uuid}-m0.avro"))
        with write_manifest(format_version=version, spec=spec, schema=schema, output_file=manifest_out,
                            snapshot_id=snapshot_id, avro_compression=codec) as manifest_writer:
            for data_file in data_files:
                manifest_writer.add_entry(ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, sequence_number=None,
                    file_sequence_number=None, data_file=data_file))
        _land(table.io, manifest_out, result)
        table_files.remember_manifest(manifest_out.location, [f.file_path for f in data_files])
        manifests: list[ManifestFile] = [manifest_writer.to_manifest_file(), *_live_manifests(parent, table.io)]

        list_out = BufferedOutput(locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro"))
        with write_manifest_list(format_version=version, output_file=list_out, snapshot_id=snapshot_id,
                                 parent_snapshot_id=parent_id, sequence_number=sequence_number,
                                 avro_compression=codec) as list_writer:
            list_writer.add_manifests(manifests)
        _land(table.io, list_out, result)
        remember_live(list_out.location)  # each holds files: the new one data_files, the others were live
    except BaseException:
        discard(table.io, result)
        raise

    collector = SnapshotSummaryCollector(partition_summary_limit=int(metadata.properties.get(
        TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)))
    for data_file in data_files:
        collector.add_file(data_file=data_file, partition_spec=spec, schema=schema)
    summary = update_snapshot_summaries(
        summary=Summary(operation=Operation.APPEND, **collector.build(), **snapshot_properties),
        previous_summary=parent.summary if parent is not None else None,
    )
    snapshot = Snapshot(  # type: ignore[call-arg]
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        manifest_list=list_out.location,
        sequence_number=sequence_number,
        summary=summary,
        schema_id=metadata.current_schema_id,
    )
    result.updates = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(  # type: ignore[call-arg]
            snapshot_id=snapshot_id, parent_snapshot_id=parent_id, ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH),
    )
    return result


# The manifests a list carries into its successor, by the list's location (lists are immutable
# and their locations unique): filtering a predecessor's ~100s of entries on every append is
# work that grows with the table, and a v2 list this module wrote knows its answer already.
# They are the entries as written (sequence numbers assigned), never the manifests handed to
# the writer: a carried entry with an unassigned number would take the next commit's.
_LIVE: LockedLRU[str, tuple[ManifestFile, ...]] = LockedLRU(256)


def _live_manifests(parent: Snapshot | None, file_io: FileIO) -> tuple[ManifestFile, ...]:
    """The parent's manifests that still hold files (pyiceberg's fast append drops the rest)."""
    if parent is None:
        return ()
    found = _LIVE.get(parent.manifest_list)
    if found is None:
        found = tuple(m for m in parent.manifests(io=file_io) if m.has_added_files() or m.has_existing_files())
        _LIVE.put(parent.manifest_list, found)
    return found


def remember_live(list_location: str) -> None:
    """Keep the entries of a v2 list just written (every one of which holds live files) as
    its successor's carried manifests."""
    written = manifest_list_cache.WRITTEN.get(list_location)  # v2: the entries as written
    if written is not None:
        _LIVE.put(list_location, written)


def land_encoded(file_io: FileIO, output: BufferedOutput, pending: list[str] | None = None) -> None:
    """Write an in-memory encoded file to its location (``durable_io.write_new``: locally its
    fsync starts at once when ``pending`` or the thread's ``deferred_fsync`` scope takes it)."""
    data = output.data
    assert data is not None, "the Avro writer did not close its stream"
    write_new(file_io, output.location, data, pending)


def discard(file_io: FileIO, written: FastAppend) -> None:
    """Remove the files of an append that will not be committed (best effort: orphan
    removal deletes what is left)."""
    for location in written.written:
        try:
            file_io.delete(location)
        except Exception:  # noqa: S110 - best effort, see above
            pass
    written.written.clear()


def _land(file_io: FileIO, output: BufferedOutput, result: FastAppend) -> None:
    """Write an encoded file to its location; locally, start its fsync at once."""
    land_encoded(file_io, output, result.syncing)
    result.written.append(output.location)


class _Capture(io.BytesIO):
    """A stream that hands its bytes to its output file when closed."""

    def __init__(self, owner: BufferedOutput) -> None:
        super().__init__()
        self._owner = owner

    def close(self) -> None:
        if not self.closed:
            self._owner.data = self.getvalue()
        super().close()


class BufferedOutput(OutputFile):
    """An ``OutputFile`` that keeps what is written in memory (``data`` once closed)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.data: bytes | None = None
        self._stream: _Capture | None = None

    def __len__(self) -> int:
        if self.data is not None:
            return len(self.data)
        return self._stream.tell() if self._stream is not None else 0

    def exists(self) -> bool:
        return False

    def to_input_file(self) -> InputFile:
        raise NotImplementedError("an in-memory output is read back from its location once written")

    def create(self, overwrite: bool = False) -> OutputStream:
        if self._stream is not None:  # pyiceberg writes each file once; a second create is a bug
            raise FileExistsError(errno.EEXIST, "already written", self.location)
        self._stream = _Capture(self)
        stream: Any = self._stream
        return stream  # type: ignore[no-any-return]
