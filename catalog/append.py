"""Appends through group commit, with exactly-once keys and per-table schema policy.

``Appender.append_stream`` writes a stream of record batches into fsync'd Parquet files
(``writer.DataFileWriter``) and then hands them to the table's ``TableCommitter``. Appends
that reach a table's committer while another commit is in flight queue up; the next leader
takes the whole queue and lands it as ONE snapshot in ONE durable catalog write (one
RocksDB batch holding the pointer, the commit-log record and every idempotency key of the
group). Each writer is answered with its own row count and the shared commit seq and
snapshot id.

All or nothing: files are written before the commit and deleted if the stream breaks off,
the input is refused, or the commit fails; a crash between the two leaves unreferenced files
that maintenance's orphan removal deletes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from catalog import fast_append
from catalog.append_schema import ConcurrentSchemaChangeError as ConcurrentSchemaChangeError
from catalog.append_schema import StagedSchema, apply_plan, restage_schema, stage_schema
from catalog.arrow_types import plain_schema
from catalog.commit_log import CommitRecord
from catalog.commit_requests import AppendResult as AppendResult
from catalog.commit_requests import CommitRequest, TableCommitter, key_writes
from catalog.context import commit_context, current_commit_context
from catalog.durable_io import DurableFileIO, PendingSync, deferred_fsync, fsync_all, local_paths
from catalog.expectations import (
    QualityGate,
    merge_summaries,
)
from catalog.fast_append import FastAppend
from catalog.idempotency import IdempotencyStore, check_key, extra_batch_writes
from catalog.metadata_json import write_metadata
from catalog.quarantine import AppendGate, QuarantineFiles, with_quarantine
from catalog.schema_policy import (
    SchemaMismatchError,
    check_unique_names,
    plan,
    policy_of,
    renamed,
    strip_field_ids,
)
from catalog.staging import StagingStore
from catalog.table import FastTransaction
from catalog.v3 import refuse_v3_write
from catalog.writer import DataFileWriter, delete_files

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.catalog.append")

COMMIT_ATTEMPTS = 8
T = TypeVar("T")


class Appender:
    """Append entry point shared by DoPut, Flight SQL ingest and in-process callers."""

    def __init__(self, catalog: RocksCatalog, idempotency_retention_s: float | None = None) -> None:
        self.catalog = catalog
        self.idempotency = IdempotencyStore(
            catalog.store, *(() if idempotency_retention_s is None else (idempotency_retention_s,))
        )
        self.staging = StagingStore(catalog.store)  # two-phase appends' records (two_phase.py)
        self._committers: dict[tuple[tuple[str, ...], str], TableCommitter] = {}
        self._registry_lock = threading.Lock()
        # Writers whose files are not committed yet: orphan removal must not touch them.
        self._active_writers: set[DataFileWriter] = set()
        # Tables with new small files since maintenance last looked: identifier -> files.
        self._dirty: dict[tuple[str, ...], int] = {}
        # Compaction holds this from writing its files to committing them, and orphan removal
        # while it sweeps: a worker process's files in flight are not in active_paths.
        self.maintenance_lock = threading.Lock()
        # Evaluates tables' quality expectations (the server sets the DuckDB one); None: a
        # table that declares expectations refuses appends (catalog.expectations).
        self.quality_gate: QualityGate | None = None
        self.on_quality: Callable[[str, dict[str, Any]], None] | None = None  # metrics

    def track_writer(self, writer: DataFileWriter) -> None:
        with self._registry_lock:
            self._active_writers.add(writer)

    def untrack_writer(self, writer: DataFileWriter) -> None:
        with self._registry_lock:
            self._active_writers.discard(writer)

    def active_paths(self) -> set[str]:
        with self._registry_lock:
            writers = list(self._active_writers)
        return {path for writer in writers for path in writer.written_paths}

    def mark_dirty(self, identifier: tuple[str, ...], files: int) -> None:
        with self._registry_lock:
            self._dirty[identifier] = self._dirty.get(identifier, 0) + files

    def take_dirty(self) -> dict[tuple[str, ...], int]:
        with self._registry_lock:
            dirty, self._dirty = self._dirty, {}
        return dirty

    def committer(self, namespace: tuple[str, ...], table: str) -> TableCommitter:
        with self._registry_lock:
            found = self._committers.get((namespace, table))
            if found is None:
                found = self._committers[(namespace, table)] = TableCommitter(self, namespace, table)
            return found

    # -- public API ---------------------------------------------------------------------

    def append_table(
        self, identifier: tuple[str, ...], data: pa.Table, idempotency_key: str | None = None,
        schema_policy: str | None = None,
    ) -> AppendResult:
        """Append an in-memory Arrow table (same path as a stream)."""
        return self.append_stream(identifier, data.schema, data.to_batches(), idempotency_key=idempotency_key,
                                  schema_policy=schema_policy)

    def append_stream(
        self,
        identifier: tuple[str, ...],
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        idempotency_key: str | None = None,
        snapshot_properties: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        schema_policy: str | None = None,
        source_position: str | None = None,
    ) -> AppendResult:
        """Append a stream of batches to an existing table; return once the commit is durable.

        ``schema_policy`` is this append's own choice (``catalog.schema_policy``); None runs
        under the table's.

        ``batches`` may raise (the client went away): then nothing is committed and every
        file written so far is deleted. ``snapshot_properties`` go into the new snapshot's
        summary and ``extra`` into the commit record, in a commit of its own (a pipe's
        checkpoint and lineage, see ``catalog.pipes``).

        Raises:
            NoSuchTableError: The table does not exist.
            SchemaMismatchError: The input does not fit the table under its schema policy.
            ValueError: A malformed idempotency key or schema policy.
            ConcurrentSchemaChangeError: The append evolves the schema and the table's schema
                changed incompatibly meanwhile (nothing committed; retry).
            CommitFailedException: The commit kept losing races (after retries).
            QualityBlocked: Rows failed a ``block`` expectation (nothing committed).
            ExpectationUnusable: An expectation could not be evaluated (nothing committed).

        ``source_position`` is recorded with quarantined rows (a connector's checkpoint).
        """
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        if idempotency_key is not None:
            check_key(idempotency_key)
        table = self.catalog.load_table(identifier)
        refuse_v3_write(table.metadata, f"append to {'.'.join(identifier)}")
        if idempotency_key is not None:
            first = self.idempotency.get(namespace, name, idempotency_key)
            if first is not None:
                for _ in batches:  # let the client finish sending; keep nothing
                    pass
                return AppendResult(**{**first, "duplicate": True})
        policy = policy_of(table.properties, schema_policy)
        policy_plan = plan(table.schema(), schema, policy, table.metadata.format_version)
        schema, batches = renamed(schema, batches, policy_plan.renames)
        staged = stage_schema(table, policy_plan) if policy_plan.changes_table else None
        metadata = staged.metadata if staged is not None else table.metadata
        gate = AppendGate(self.catalog, tuple(identifier), table.properties, self.quality_gate, source_position,
                          self.on_quality)
        batches = gate.wrap(batches)
        writer = DataFileWriter(metadata, table.io, schema, policy_plan.required_columns)
        self.track_writer(writer)
        try:
            files = self.write_all(writer, schema, batches)  # not yet fsync'd: see _land_append
            quarantined, extra = gate.finish(extra)
            return self._commit_files(table, identifier, files, writer.rows, idempotency_key, staged,
                                      snapshot_properties, extra, quarantined)
        except BaseException as exc:
            gate.abort(exc)
            raise
        finally:
            self.untrack_writer(writer)
            gate.close()

    def create_from_stream(
        self,
        identifier: tuple[str, ...],
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        idempotency_key: str | None = None,
        replace: bool = False,
    ) -> AppendResult:
        """Create a table from the stream's schema holding the stream's rows: one commit.

        The whole stream is written (against a staged, unregistered table) before anything
        is committed, so a stream that breaks off creates nothing and, with ``replace``,
        leaves the old table in place. Then, in the table's commit slot, one catalog commit
        points the name at metadata that already holds the rows (operation ``create``, or
        ``replace`` when ``replace`` swaps out an existing table): readers never see the
        table empty or missing, and a crash leaves either the old state or the new one.

        Raises:
            TableAlreadyExistsError: The table exists (and ``replace`` is false).
            NoSuchNamespaceError: The namespace does not exist.
            SchemaMismatchError: Duplicate or unstorable input columns.
        """
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        qualified = ".".join(identifier)
        if idempotency_key is not None:
            check_key(idempotency_key)
        check_unique_names(schema)
        staged = self.catalog._create_staged_table(identifier, plain_schema(strip_field_ids(schema)))
        writer = DataFileWriter(staged.metadata, staged.io, schema)
        self.track_writer(writer)
        try:
            files = self.write_all(writer, schema, batches)
            try:
                with self.committer(namespace, name).exclusive():
                    if idempotency_key is not None:
                        stored = self.idempotency.get(namespace, name, idempotency_key)
                        if stored is not None:
                            delete_files(staged.io, [f.file_path for f in files])
                            return AppendResult(**{**stored, "duplicate": True})
                    exists = self.catalog.table_exists(identifier)
                    if exists and not replace:
                        raise TableAlreadyExistsError(f"Table already exists: {qualified}")
                    record = self._land_created(staged, files, writer.rows, idempotency_key, replacing=exists)
            except BaseException:
                delete_files(staged.io, [f.file_path for f in files])
                raise
            if files:
                self.mark_dirty(tuple(identifier), len(files))
            return AppendResult(qualified, record.seq, record.snapshot_id, writer.rows)
        finally:
            self.untrack_writer(writer)

    def _land_created(
        self, staged: Any, files: list[DataFile], rows: int, key: str | None, replacing: bool
    ) -> CommitRecord:
        """Commit a staged table together with ``files`` (caller holds the table's slot)."""
        namespace, name = tuple(staged.name()[:-1]), staged.name()[-1]
        tx = FastTransaction(staged)
        if files:
            with tx.update_snapshot().fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
        metadata = tx.table_metadata
        fsync_all(local_paths(f.file_path for f in files))
        write_metadata(metadata, staged.io, staged.metadata_location)
        landed: list[CommitRecord] = []

        def idempotency_writes(record: CommitRecord) -> dict[bytes, bytes]:
            landed.append(record)
            return key_writes(namespace, name, record, [(key, rows)])

        counts = {"added_rows": rows, "added_files": len(files), "deleted_rows": 0}
        with extra_batch_writes(idempotency_writes):
            self.catalog._register_pointer(
                namespace, name, staged.metadata_location, metadata,
                "replace" if replacing else "create", overwrite=replacing, counts=counts,
            )
        return landed[-1]

    @staticmethod
    def write_all(writer: DataFileWriter, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> list[DataFile]:
        try:
            for batch in batches:
                if batch.schema.names != schema.names:
                    raise SchemaMismatchError("the stream changed its schema midway")
                writer.write(batch)
            return writer.finish(sync=False)
        except BaseException:
            writer.abort()
            raise

    def _commit_files(
        self,
        table: Table,
        identifier: tuple[str, ...],
        files: list[DataFile],
        rows: int,
        idempotency_key: str | None,
        staged: StagedSchema | None,
        snapshot_properties: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        quarantined: QuarantineFiles | None = None,
    ) -> AppendResult:
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        qualified = ".".join(identifier)
        if not files and staged is not None:
            # No rows, but the append asked to evolve the table (schema policy evolve): the
            # schema change is the commit, as an engine's schema merge of an empty write is.
            # A distributed writer (Spark) evolves the table this way before its staged writes,
            # which cannot change the schema themselves.
            with table.update_schema() as update:
                apply_plan(update, staged.plan)
            snapshot = table.current_snapshot()
            return AppendResult(qualified, self.catalog.log.head(), snapshot.snapshot_id if snapshot else None, 0)
        if not files and quarantined is None:
            # Nothing to commit: answer with the table's current state.
            snapshot = table.current_snapshot()
            return AppendResult(qualified, self.catalog.log.head(), snapshot.snapshot_id if snapshot else None, 0)
        request = CommitRequest(files, rows, idempotency_key, current_commit_context().principal, staged,
                           snapshot_properties=dict(snapshot_properties or {}), extra=dict(extra or {}),
                           syncing=PendingSync(local_paths(f.file_path for f in files)), quarantine=quarantined)
        try:
            result = self.committer(namespace, name).submit(request)
        except BaseException:
            delete_files(table.io, [f.file_path for f in files])
            raise
        if result.duplicate:
            delete_files(table.io, [f.file_path for f in files])
        else:
            self.mark_dirty(tuple(identifier), len(files))
        return result

    # -- group commit (called by the leader, holding the table's commit slot) -------------

    def commit_group(self, namespace: tuple[str, ...], name: str, group: list[CommitRequest]) -> None:
        to_commit: list[CommitRequest] = []
        first_by_key: dict[str, CommitRequest] = {}
        replays: list[tuple[CommitRequest, CommitRequest]] = []
        for req in group:
            if req.key is not None:
                stored = self.idempotency.get(namespace, name, req.key)
                if stored is not None:
                    req.result, req.done = AppendResult(**{**stored, "duplicate": True}), True
                    continue
                if req.key in first_by_key:
                    replays.append((req, first_by_key[req.key]))
                    continue
                first_by_key[req.key] = req
            to_commit.append(req)
        plain = [r for r in to_commit if not r.alone]
        if plain:
            try:
                self._commit_batch(namespace, name, plain)
            except Exception as exc:
                for req in plain:
                    req.error, req.done = exc, True
        for req in to_commit:
            if req.alone:
                try:
                    if req.prepare is not None:
                        req.prepare()
                    self._commit_batch(namespace, name, [req])
                except Exception as exc:  # this writer's failure only
                    req.error, req.done = exc, True
        for req, first in replays:
            if first.error is not None:
                req.error, req.done = first.error, True
                continue
            assert first.result is not None
            req.result, req.done = AppendResult(**{**first.result.to_json(), "duplicate": True}), True

    def _commit_batch(self, namespace: tuple[str, ...], name: str, to_commit: list[CommitRequest]) -> None:
        """Land ``to_commit`` as one snapshot in one catalog commit (with their keys)."""
        qualified = ".".join((*namespace, name))
        landed: list[CommitRecord] = []

        def idempotency_writes(record: CommitRecord) -> dict[bytes, bytes]:
            landed.append(record)
            writes = key_writes(namespace, name, record, [(req.key, req.rows) for req in to_commit])
            for req in to_commit:
                if req.batch_writes is not None:
                    writes.update(req.batch_writes(record))
            return writes

        principals = sorted({r.principal for r in to_commit if r.principal})
        extra: dict[str, Any] = {"group_size": len(to_commit)} if len(to_commit) > 1 else {}
        for req in to_commit:
            extra.update(req.extra)
        qualities = [req.extra["quality"] for req in to_commit if "quality" in req.extra]
        if len(qualities) > 1:  # a group of gated appends: one summary for the one commit
            extra["quality"] = merge_summaries(qualities)
        self._retry(
            lambda: self._land_append(namespace, name, to_commit, idempotency_writes),
            principal=",".join(principals) or None,
            extra=extra,
        )
        record = landed[-1]
        for req in to_commit:
            req.result, req.done = AppendResult(qualified, record.seq, record.snapshot_id, req.rows), True

    def _land_append(
        self,
        namespace: tuple[str, ...],
        name: str,
        requests: list[CommitRequest],
        extras: Callable[[CommitRecord], dict[bytes, bytes]],
    ) -> None:
        table = self.catalog.load_table((*namespace, name))
        io = table.io
        if isinstance(io, DurableFileIO):
            io.defer_fsync()  # this io instance is ours alone (manifests are written in other threads)
        tx = table.transaction()
        staged = requests[0].staged_schema if len(requests) == 1 else None
        if staged is not None:
            restage_schema(table, tx, staged)
        properties = requests[0].snapshot_properties if len(requests) == 1 else {}
        make = requests[0].producer if len(requests) == 1 else None
        data_files = [data_file for req in requests for data_file in req.data_files]
        fast: FastAppend | None = None
        if staged is None and make is None and data_files and fast_append.supported(table):
            fast = fast_append.append(table, data_files, properties)
            tx._apply(fast.updates, fast.requirements)
        else:
            update = tx.update_snapshot(snapshot_properties=properties)
            with (make(update, table) if make is not None else update.fast_append()) as append:
                for data_file in data_files:
                    append.append_data_file(data_file)
        unsynced = [f.file_path for f in data_files]
        # Kept until the commit waits for them: fsync_all only finds the fsyncs a PendingSync
        # started while that PendingSync is alive.
        manifests = io.take_deferred() if isinstance(io, DurableFileIO) else []
        if fast is not None:
            manifests = [*manifests, *fast.syncing]

        def durable_then_extras(record: CommitRecord) -> dict[bytes, bytes]:
            # Called by the catalog right before its RocksDB batch: every file the new
            # metadata references (data, manifests, manifest list, the metadata JSON itself)
            # becomes durable in one concurrent fsync round instead of one round per file.
            if (tuple(record.namespace), record.table) != (namespace, name):
                return {}  # the quarantine table's record, landing in the target's batch
            fsync_all(local_paths([*unsynced, *manifests, *metadata_files]))
            return extras(record)

        quarantined = requests[0].quarantine if len(requests) == 1 else None
        land = with_quarantine(self.catalog, table, tx, quarantined, unsynced)
        try:
            with deferred_fsync() as metadata_files, extra_batch_writes(durable_then_extras):
                land()
        except CommitFailedException:
            # Refused before anything landed (a lost race: _retry writes a new snapshot), so
            # these files are referenced by nothing. Other failures leave them to orphan
            # removal: whether the catalog write landed may not be known.
            if fast is not None:
                fast_append.discard(io, fast)
            raise

    @staticmethod
    def _retry(fn: Callable[[], T], principal: str | None, extra: dict[str, Any]) -> T:
        delay = 0.005
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                with commit_context(principal=principal, extra=extra):
                    return fn()
            except ConcurrentSchemaChangeError:
                raise
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS:
                    raise
                logger.debug("append lost a commit race (attempt %d); retrying", attempt)
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        raise AssertionError("unreachable")


