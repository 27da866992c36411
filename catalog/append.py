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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from catalog.commit_log import CommitRecord
from catalog.context import commit_context, current_commit_context
from catalog.durable_io import DurableFileIO
from catalog.idempotency import IdempotencyStore, check_key, encode_result, extra_batch_writes, idempotency_key
from catalog.schema_policy import SchemaMismatchError, SchemaPlan, plan, policy_of
from catalog.writer import DataFileWriter, delete_files

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.catalog.append")

COMMIT_ATTEMPTS = 8
T = TypeVar("T")


@dataclass
class AppendResult:
    """What a writer is told once its rows are durable."""

    table: str
    commit_seq: int
    snapshot_id: int | None
    rows: int
    duplicate: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "commit_seq": self.commit_seq,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows,
            "duplicate": self.duplicate,
        }


@dataclass
class _Request:
    data_files: list[DataFile]
    rows: int
    key: str | None
    principal: str | None
    result: AppendResult | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class _Pending:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[_Request] = field(default_factory=list)


class TableCommitter:
    """Serialises commits to one table and coalesces queued appends (leader/follower)."""

    def __init__(self, appender: Appender, namespace: tuple[str, ...], table: str) -> None:
        self._appender = appender
        self.namespace = namespace
        self.table = table
        self._leader = threading.Lock()
        self._pending = _Pending()

    def submit(self, request: _Request) -> AppendResult:
        with self._pending.lock:
            self._pending.requests.append(request)
        with self._leader:
            if not request.done:
                with self._pending.lock:
                    group, self._pending.requests = self._pending.requests, []
                try:
                    self._appender._commit_group(self.namespace, self.table, group)
                except BaseException as exc:
                    for req in group:
                        if not req.done:
                            req.error, req.done = exc, True
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the table's commit slot (schema changes, maintenance commits)."""
        with self._leader:
            yield


class Appender:
    """Append entry point shared by DoPut, Flight SQL ingest and in-process callers."""

    def __init__(self, catalog: RocksCatalog, idempotency_retention_s: float | None = None) -> None:
        self.catalog = catalog
        self.idempotency = IdempotencyStore(
            catalog.store, *(() if idempotency_retention_s is None else (idempotency_retention_s,))
        )
        self._committers: dict[tuple[tuple[str, ...], str], TableCommitter] = {}
        self._registry_lock = threading.Lock()
        # Writers whose files are not committed yet: orphan removal must not touch them.
        self._active_writers: set[DataFileWriter] = set()
        # Tables with new small files since maintenance last looked: identifier -> files.
        self._dirty: dict[tuple[str, ...], int] = {}

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
        self, identifier: tuple[str, ...], data: pa.Table, idempotency_key: str | None = None
    ) -> AppendResult:
        """Append an in-memory Arrow table (same path as a stream)."""
        return self.append_stream(identifier, data.schema, data.to_batches(), idempotency_key=idempotency_key)

    def append_stream(
        self,
        identifier: tuple[str, ...],
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        idempotency_key: str | None = None,
        on_schema_change: Callable[[SchemaPlan], None] | None = None,
    ) -> AppendResult:
        """Append a stream of batches to an existing table; return once the commit is durable.

        ``batches`` may raise (the client went away): then nothing is committed and every
        file written so far is deleted.

        Raises:
            NoSuchTableError: The table does not exist.
            SchemaMismatchError: The input does not fit the table under its schema policy.
            ValueError: A malformed idempotency key.
            CommitFailedException: The commit kept losing races (after retries).
        """
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        if idempotency_key is not None:
            check_key(idempotency_key)
        table = self.catalog.load_table(identifier)
        if idempotency_key is not None:
            first = self.idempotency.get(namespace, name, idempotency_key)
            if first is not None:
                for _ in batches:  # let the client finish sending; keep nothing
                    pass
                return AppendResult(**{**first, "duplicate": True})
        table = self._prepare_schema(table, namespace, name, schema, on_schema_change)
        policy_plan = plan(table.schema(), schema, policy_of(table.properties), table.metadata.format_version)
        writer = DataFileWriter(table.metadata, table.io, schema, policy_plan.required_columns)
        self.track_writer(writer)
        try:
            files = self._write_all(writer, schema, batches)
            return self._commit_files(table, identifier, files, writer.rows, idempotency_key)
        finally:
            self.untrack_writer(writer)

    @staticmethod
    def _write_all(writer: DataFileWriter, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> list[DataFile]:
        try:
            for batch in batches:
                if batch.schema.names != schema.names:
                    raise SchemaMismatchError("the stream changed its schema midway")
                writer.write(batch)
            return writer.finish()
        except BaseException:
            writer.abort()
            raise

    def _commit_files(
        self, table: Table, identifier: tuple[str, ...], files: list[DataFile], rows: int, idempotency_key: str | None
    ) -> AppendResult:
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        qualified = ".".join(identifier)
        if not files:
            # Nothing to commit: answer with the table's current state.
            snapshot = table.current_snapshot()
            return AppendResult(qualified, self.catalog.log.head(), snapshot.snapshot_id if snapshot else None, 0)
        request = _Request(files, rows, idempotency_key, current_commit_context().principal)
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

    # -- schema ---------------------------------------------------------------------------

    def _prepare_schema(
        self,
        table: Table,
        namespace: tuple[str, ...],
        name: str,
        schema: pa.Schema,
        on_schema_change: Callable[[SchemaPlan], None] | None,
    ) -> Table:
        """Evolve the table (one 'schema' commit) when the input needs it and policy allows."""
        first = plan(table.schema(), schema, policy_of(table.properties), table.metadata.format_version)
        if not first.changes_table:
            return table
        with self.committer(namespace, name).exclusive():
            table = self.catalog.load_table((*namespace, name))
            needed = plan(table.schema(), schema, policy_of(table.properties), table.metadata.format_version)
            if not needed.changes_table:
                return table
            if on_schema_change is not None:
                on_schema_change(needed)
            with commit_context(operation="schema"), table.update_schema() as update:
                for column, column_type in needed.add_columns:
                    update.add_column(column, column_type)
                for column, column_type in needed.widen_columns:
                    update.update_column(column, field_type=column_type)
            logger.info(
                "evolved %s: added %s, widened %s",
                ".".join((*namespace, name)),
                [c for c, _ in needed.add_columns],
                [c for c, _ in needed.widen_columns],
            )
            return self.catalog.load_table((*namespace, name))

    # -- group commit (called by the leader, holding the table's commit slot) -------------

    def _commit_group(self, namespace: tuple[str, ...], name: str, group: list[_Request]) -> None:
        qualified = ".".join((*namespace, name))
        to_commit: list[_Request] = []
        first_by_key: dict[str, _Request] = {}
        replays: list[tuple[_Request, _Request]] = []
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
        if not to_commit:
            return
        landed: list[CommitRecord] = []

        def idempotency_writes(record: CommitRecord) -> dict[bytes, bytes]:
            landed.append(record)
            return {
                idempotency_key(namespace, name, req.key): encode_result(
                    AppendResult(qualified, record.seq, record.snapshot_id, req.rows).to_json()
                )
                for req in to_commit
                if req.key is not None
            }

        principals = sorted({r.principal for r in to_commit if r.principal})
        extra = {"group_size": len(to_commit)} if len(to_commit) > 1 else {}
        self._retry(
            lambda: self._land_append(namespace, name, to_commit, idempotency_writes),
            principal=",".join(principals) or None,
            extra=extra,
        )
        record = landed[-1]
        for req in to_commit:
            req.result, req.done = AppendResult(qualified, record.seq, record.snapshot_id, req.rows), True
        for req, first in replays:
            assert first.result is not None
            req.result, req.done = AppendResult(**{**first.result.to_json(), "duplicate": True}), True

    def _land_append(
        self,
        namespace: tuple[str, ...],
        name: str,
        requests: list[_Request],
        extras: Callable[[CommitRecord], dict[bytes, bytes]],
    ) -> None:
        table = self.catalog.load_table((*namespace, name))
        io = table.io
        if isinstance(io, DurableFileIO):
            io.defer_fsync()  # this io instance is ours alone: sync its manifests in one round
        tx = table.transaction()
        with tx.update_snapshot().fast_append() as append:
            for req in requests:
                for data_file in req.data_files:
                    append.append_data_file(data_file)
        if isinstance(io, DurableFileIO):
            io.sync_deferred()
        with extra_batch_writes(extras):
            tx.commit_transaction()

    @staticmethod
    def _retry(fn: Callable[[], T], principal: str | None, extra: dict[str, Any]) -> T:
        delay = 0.005
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                with commit_context(principal=principal, extra=extra):
                    return fn()
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS:
                    raise
                logger.debug("append lost a commit race (attempt %d); retrying", attempt)
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        raise AssertionError("unreachable")
