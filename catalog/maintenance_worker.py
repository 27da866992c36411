"""The CPU-heavy half of compaction, runnable in a worker process.

Compaction reads the small data files, writes target-size ones and rewrites manifests: tens
of milliseconds of Python (Avro encoding, file statistics) per run. Inside the server that
work holds the GIL against every other thread, and the commit feed's fan-out, which takes
the GIL for each write to a subscriber, waited behind it (bench_feed: every one of the
slowest commit -> subscriber deliveries overlapped a compaction).

So the server hands the work to a worker process, the way a REST catalog's client works: the
worker opens the table from its metadata file (no catalog), writes the files, stages the
snapshot and returns the commit request (requirements and updates, as JSON); the server
applies it with ``RocksCatalog.commit_table``, a commit as short as any append's.

Orphan removal's heavy part, reading every retained snapshot's manifests to learn which
files are referenced, runs here too (``referenced_files``).

The functions are stateless (a ``TableRef`` and picklable arguments in, picklable results
out), so they run the same in any process; ``MaintenanceWorker`` runs them either in a
spawned process or inline (the offline ``icefloe maintain`` and the in-process tests).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableRequest, FileScanTask, Namespace, Table, TableIdentifier
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import AssertTableUUID
from pyiceberg.table.update.snapshot import _MergeAppendFiles

from catalog import avro_cache, durable_io, manifest_list_cache
from catalog.delete_cleanup import DroppingOverwrite, unneeded_delete_files
from catalog.delete_reads import visible_batches
from catalog.deletes import DeleteSets, PlannedFile, plan_files
from catalog.object_store import OBJECT_SCHEMES, ObjectStoreFailed, storage_failure
from catalog.sandbox import ConfinedFileIO, Warehouse, confine
from catalog.table import RocksTable
from catalog.writer import DataFileWriter

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.catalog.maintenance_worker")

T = TypeVar("T")


class MetadataGone(RuntimeError):
    """A version's metadata file was deleted before the worker read it: the table moved on by
    more than ``write.metadata.previous-versions-max`` commits meanwhile (while the worker
    process started, say). The caller retries with the current version."""


@dataclass(frozen=True)
class TableRef:
    """What a worker needs to open one version of a table without the catalog."""

    identifier: tuple[str, ...]
    metadata_location: str
    # The FileIO properties the catalog itself uses (never a table's own).
    io_properties: dict[str, str]
    # The warehouse and what the server keeps in it: the worker's FileIO is confined to the
    # table's folder by the same rules as the catalog's (catalog.sandbox).
    warehouse: str = ""
    reserved: tuple[str, ...] = ()

    @classmethod
    def of(cls, catalog: RocksCatalog, table: Table) -> TableRef:
        return cls(
            identifier=tuple(table.name()),
            metadata_location=table.metadata_location,
            io_properties=catalog._io_properties(),
            warehouse=catalog.files.location,
            reserved=catalog.files.extra_reserved,
        )

    def open(self) -> Table:
        """The table at this version.

        Raises:
            MetadataGone: If its metadata file was deleted (see ``MetadataGone``).
        """
        warehouse = Warehouse(self.warehouse, self.reserved)
        try:
            metadata = FromInputFile.table_metadata(
                ConfinedFileIO(self.io_properties, warehouse, None).new_input(self.metadata_location))
        except FileNotFoundError:
            raise MetadataGone(self.metadata_location) from None
        io = ConfinedFileIO(self.io_properties, warehouse, warehouse.table_root(metadata.location))
        # A RocksTable: its transactions apply updates without pyiceberg's deep copy of the
        # whole metadata per update (a third of a 170-file compaction's CPU went to copying).
        return RocksTable(
            self.identifier,
            metadata=metadata,
            metadata_location=self.metadata_location,
            io=io,
            catalog=NoopCatalog("icefloe-maintenance-worker"),
        )


@dataclass(frozen=True)
class Rewrite:
    """Data files written to replace small ones, not committed yet."""

    base_snapshot_id: int | None
    old: list[DataFile]
    new: list[DataFile]
    # Old file path -> the identity of the delete files applied when it was read: a delete
    # that lands on one of them before the commit must not be lost (the rewrite is dropped).
    deletes: dict[str, Any] = field(default_factory=dict)


def live_data_files(table: Table) -> list[DataFile]:
    """The data files (not delete files) the table's current snapshot references."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    files: list[DataFile] = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                files.append(entry.data_file)
    return files


def rewrite_small_files(ref: TableRef, small_limit: int, min_files: int, max_files: int) -> Rewrite | None:
    """Write the current snapshot's small data files into target-size files.

    Returns:
        The rewrite to commit, or None when fewer than ``min_files`` (at least 2) are small.

    Raises:
        RuntimeError: If the files read did not hold the rows their manifests promise
            (nothing is left behind).
    """
    table = ref.open()
    if table.metadata.format_version >= 3:
        return None  # icefloe does not write v3 tables (catalog.v3)
    base = table.current_snapshot()
    planned = plan_files(table.metadata, table.io, base.snapshot_id) if base is not None else []
    # Files with row-level deletes are rewritten whatever their size: the new files hold only
    # the rows a reader sees, and the deletes no longer apply to them (a newer sequence number).
    with_deletes = [p for p in planned if p.deletes]
    if with_deletes:
        chosen = (with_deletes + [p for p in planned if not p.deletes and p.data_file.file_size_in_bytes < small_limit])
        return _rewrite_with_deletes(table, base, chosen[:max_files])
    small = [p.data_file for p in planned if p.data_file.file_size_in_bytes < small_limit][:max_files]
    if len(small) < max(min_files, 2):
        return None
    input_schema, batches = _rows_of(table, small)
    writer = DataFileWriter(table.metadata, table.io, input_schema)
    try:
        for batch in batches:
            writer.write(batch)
        new_files = writer.finish()
        expected = sum(f.record_count for f in small)
        if writer.rows != expected or sum(f.record_count for f in new_files) != expected:
            raise RuntimeError(f"compaction read {writer.rows} rows from files holding {expected}; not committed")
    except BaseException:
        writer.abort()
        raise
    # No deletes applied to them when read: a merge-on-read delete landing on one of them
    # before the commit must drop the rewrite too (stage_rewrite), or it would be undone.
    return Rewrite(base.snapshot_id if base else None, small, new_files, {f.file_path: () for f in small})


def _rewrite_with_deletes(table: Table, base: Any, chosen: list[PlannedFile]) -> Rewrite:
    """Rewrite ``chosen`` files with their deletes applied (set-wise, ``catalog.deletes``)."""
    schema = table.schema()
    target = schema.as_arrow()
    sets = DeleteSets()
    for p in chosen:
        confine(table.io, p.data_file.file_path)
    writer = DataFileWriter(table.metadata, table.io, target)
    read = 0
    try:
        for p in chosen:
            for batch in visible_batches(table.io, sets, p.data_file, p.deletes, schema, target):
                read += batch.num_rows
                writer.write(batch)
        new_files = writer.finish()
        if writer.rows != read or sum(f.record_count for f in new_files) != read:
            raise RuntimeError(f"compaction wrote {writer.rows} of the {read} rows it read; not committed")
    except BaseException:
        writer.abort()
        raise
    return Rewrite(base.snapshot_id if base is not None else None, [p.data_file for p in chosen], new_files,
                   {p.data_file.file_path: p.deletes.key for p in chosen})


def _rows_of(table: Table, files: list[DataFile]) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The rows of ``files`` as batches of one schema, for the writer.

    The common case, local files all written with the table's current schema, is read as one
    Arrow dataset in its files' own types: pyiceberg's scan opens each file as a task of its
    own and casts every batch to its read types (large strings), about 0.7 ms per file, most
    of a compaction of many tiny files. Anything else (object storage, files of an older
    schema) goes through pyiceberg's scan, which resolves columns by field id.
    """
    schema = table.schema()
    for f in files:
        confine(table.io, f.file_path)
    paths = [durable_io.local_path(f.file_path) for f in files]
    if all(paths):
        try:
            dataset = ds.dataset(cast(list[str], paths), format="parquet")
            physical = {fragment.physical_schema for fragment in dataset.get_fragments()}
        except (OSError, pa.ArrowException):
            physical = set()  # let pyiceberg's scan report what is wrong with a file
        if len(physical) == 1:
            file_schema = physical.pop()
            if _holds_fields_of(file_schema, schema):
                # The dataset's schema is its first file's, here every file's: scan it as it is.
                return file_schema, dataset.to_batches(batch_readahead=4, fragment_readahead=8)
    arrow_schema = schema.as_arrow()
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
    # A list, not a generator: ArrowScan walks its tasks more than once.
    scanned = scan.to_record_batches([FileScanTask(f) for f in files])
    return arrow_schema, (pa.RecordBatch.from_arrays(b.columns, schema=arrow_schema) for b in scanned)


def _holds_fields_of(file_schema: pa.Schema, schema: Schema) -> bool:
    """Whether a Parquet file's schema is exactly ``schema``'s columns: same field ids, names,
    order, types and nullability (so its rows need no resolution by field id)."""
    try:
        return pyarrow_to_schema(file_schema).as_struct() == schema.as_struct()
    except (ValueError, TypeError, KeyError, NotImplementedError):
        return False  # no field ids, or a type pyiceberg cannot map: resolve through the scan


def stage_rewrite(ref: TableRef, rewrite: Rewrite) -> str | None:
    """Stage the snapshot that swaps ``rewrite.old`` for ``rewrite.new`` on ``ref``'s version.

    Returns:
        The commit request (``CommitTableRequest`` JSON), or None when some old file is no
        longer live (an overwrite or delete landed since the rewrite was planned).
    """
    table = ref.open()
    current = table.current_snapshot()
    if current is None or current.snapshot_id != rewrite.base_snapshot_id:
        # Appends since the scan only add files; anything else (overwrite, delete,
        # replace) may have removed some of ours: check they are all still live.
        live = {f.file_path for f in live_data_files(table)}
        if any(f.file_path not in live for f in rewrite.old):
            return None
        if rewrite.deletes and current is not None:  # a merge-on-read delete since the read would be undone
            planned = plan_files(table.metadata, table.io, current.snapshot_id)
            now = {p.data_file.file_path: p.deletes.key for p in planned}
            if any(now.get(path) != key for path, key in rewrite.deletes.items()):
                return None
    tx = table.transaction()
    producer = DroppingOverwrite(operation=Operation.OVERWRITE, transaction=tx, io=table.io)
    for data_file in rewrite.old:
        producer.delete_data_file(data_file)
    if current is not None:  # delete files that applied only to the rewritten files go too
        for delete_file in unneeded_delete_files(table.metadata, table.io, current, (f.file_path for f in rewrite.old)):
            producer.drop_delete_file(delete_file)
    for data_file in rewrite.new:
        producer.append_data_file(data_file)
    producer.commit()
    return _commit_request(table, tx)


class _MergeAllManifests(_MergeAppendFiles):
    """A snapshot that adds nothing and merges the current data manifests."""

    def __init__(self, tx: Any, io: Any) -> None:
        super().__init__(Operation.APPEND, tx, io)
        self._min_count_to_merge = 2
        self._merge_enabled = True


def stage_manifest_merge(ref: TableRef, threshold: int) -> tuple[int, str | None]:
    """Stage a snapshot merging the current manifests when there are at least ``threshold``.

    Returns:
        The number of manifests of the current snapshot, and the commit request JSON (None
        when there are fewer than ``threshold``).
    """
    table = ref.open()
    snapshot = table.current_snapshot()
    if snapshot is None or table.metadata.format_version >= 3:  # no v3 writes (catalog.v3)
        return 0, None
    count = len(snapshot.manifests(table.io))
    if count < threshold:
        return count, None
    tx = table.transaction()
    _MergeAllManifests(tx, table.io).commit()
    return count, _commit_request(table, tx)


def referenced_files(refs: list[TableRef]) -> set[str]:
    """Local paths of every file the tables' retained snapshots and metadata reference."""
    paths: set[str] = set()
    for ref in refs:
        table = ref.open()
        metadata = table.metadata
        paths.add(ref.metadata_location)
        paths.update(entry.metadata_file for entry in metadata.metadata_log)
        paths.update(s.statistics_path for s in metadata.statistics)
        seen_manifests: set[str] = set()
        for snapshot in metadata.snapshots:
            paths.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(table.io):
                paths.add(manifest.manifest_path)
                if manifest.manifest_path in seen_manifests:
                    continue
                seen_manifests.add(manifest.manifest_path)
                # Entries marked DELETED name files that only older (expired) snapshots needed.
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    paths.add(entry.data_file.file_path)
    return {local_path(p) for p in paths}


def referenced_since(moved: list[tuple[TableRef, frozenset[int]]]) -> set[str]:
    """Local paths the tables' versions reference beyond what ``referenced_files`` read on the
    versions holding the given snapshot ids: their metadata files, and the manifest lists,
    manifests and data files of newer snapshots. Cheap: only new snapshots' manifests are read.
    """
    paths: set[str] = set()
    for ref, known in moved:
        table = ref.open()
        metadata = table.metadata
        paths.add(ref.metadata_location)
        paths.update(entry.metadata_file for entry in metadata.metadata_log)
        paths.update(s.statistics_path for s in metadata.statistics)
        for snapshot in metadata.snapshots:
            if snapshot.snapshot_id in known:
                continue
            paths.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(table.io):
                paths.add(manifest.manifest_path)
                if manifest.added_snapshot_id in known:
                    continue  # written by a snapshot already read: its files are counted
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    paths.add(entry.data_file.file_path)
    return {local_path(p) for p in paths}


def local_path(location: str) -> str:
    """The form in which orphan removal compares file locations: an absolute local path, or
    ``s3://bucket/key`` for an object (``s3a://`` / ``s3n://`` name the same object)."""
    parsed = urlparse(location)
    if parsed.scheme in OBJECT_SCHEMES:
        return f"s3://{parsed.netloc}/{parsed.path.lstrip('/')}"
    return os.path.abspath(parsed.path if parsed.scheme == "file" else location)


def _commit_request(table: Table, tx: Any) -> str:
    # Transaction.commit_transaction would add this requirement before sending.
    requirements = (*tx._requirements, AssertTableUUID(uuid=table.metadata.table_uuid))
    identifier = table.name()
    return CommitTableRequest(
        identifier=TableIdentifier(namespace=Namespace(root=list(identifier[:-1])), name=identifier[-1]),
        requirements=requirements,
        updates=tx._updates,
    ).model_dump_json()


def apply_commit_request(catalog: RocksCatalog, table: Table, request_json: str) -> None:
    """Commit a request staged by a worker on ``table``'s version.

    Raises:
        CommitFailedException: A requirement no longer holds (the table moved on).
    """
    request = CommitTableRequest.model_validate_json(request_json)
    catalog.commit_table(table, tuple(request.requirements), tuple(request.updates))


# How much lower the worker process's CPU priority is than the server's.
WORKER_NICENESS = 10


class WorkerDied(RuntimeError):
    """The worker process ended during a call (killed, crashed, or the worker was closed)."""


def _serve(conn: Connection) -> None:
    """The worker process: run each (function, arguments) received, answer (ok, value)."""
    avro_cache.install()
    manifest_list_cache.install()
    # Background work: on a busy machine the serving process comes first (an append waits for
    # its CPU, never for compaction's).
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return  # the server closed its end or died (even kill -9 closes it)
        try:
            answer: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:
            # Its causes do not survive the pipe: an object-store failure goes as its message.
            failure = storage_failure(exc)
            answer = (False, exc if failure is None else ObjectStoreFailed(failure))
        try:
            try:
                conn.send(answer)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                conn.send((False, RuntimeError(f"maintenance worker could not send its answer: {exc}")))
        except OSError:
            return


class MaintenanceWorker:
    """Runs staging functions in one spawned worker process, or inline (``in_process``).

    One call at a time. The process is spawned (not forked: the server is multi-threaded) on
    first use, replaced after it dies, and killed by ``close`` even in the middle of a call
    (what it wrote is not committed; orphan removal takes it later). It exits by itself when
    the server dies, as its end of the pipe then closes.
    """

    def __init__(self, in_process: bool = False) -> None:
        self.in_process = in_process
        self._call_lock = threading.Lock()
        self._state_lock = threading.Lock()  # never held while waiting for the process
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)`` in the worker and return its result (or raise its exception).

        Raises:
            WorkerDied: If the worker is closed, or its process ended during the call (the
                next call starts a new one).
        """
        if self.in_process:
            return fn(*args)
        with self._call_lock:
            conn = self._connection()
            try:
                conn.send((fn, args))
                ok, value = conn.recv()
            except (EOFError, OSError) as exc:
                self._discard(conn)
                raise WorkerDied("the maintenance worker process ended during the call") from exc
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def _connection(self) -> Connection:
        with self._state_lock:
            if self._closed:
                raise WorkerDied("the maintenance worker is closed")
            if self._conn is None:
                context = multiprocessing.get_context("spawn")
                conn, child_conn = context.Pipe()
                process = context.Process(
                    target=_serve, args=(child_conn,), name="icefloe-maintenance-worker", daemon=True
                )
                process.start()
                child_conn.close()  # so that the process's death reaches us as end-of-file
                self._process, self._conn = process, conn
            return self._conn

    def _discard(self, conn: Connection) -> None:
        with self._state_lock:
            if self._conn is not conn:
                return
            process, self._process, self._conn = self._process, None, None
        logger.warning("maintenance worker process ended; a new one starts on next use")
        conn.close()
        if process is not None:
            process.join(timeout=5)

    def close(self) -> None:
        """Stop the worker process (killing it if a call is running)."""
        with self._state_lock:
            self._closed = True
            process, conn = self._process, self._conn
        if process is None or conn is None:
            return
        if self._call_lock.acquire(blocking=False):
            try:
                conn.close()  # idle: it exits at end-of-file
                process.join(timeout=5)
            finally:
                self._call_lock.release()
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


IN_PROCESS = MaintenanceWorker(in_process=True)
