"""Keyed changes to several tables in ONE catalog commit: a source transaction stays atomic.

A CDC connector replicating several tables of one database hands over, per batch of whole
source transactions, the final image of every key it touched in each table. Applying one
table's part is what ``catalog.keyed_changes`` does (delete the target rows of the touched
keys, append the new images, by the table's ``write.delete.mode``); here every table's part,
with the connector's checkpoint in each new snapshot's summary and each table's idempotency
key, goes to ``RocksCatalog.commit_tables``: one fsync'd RocksDB batch, the multi-table commit
Flight SQL transactions use. A reader sees every table with the batch or every table without
it, never one of each.

The commit slots (``catalog.commit_requests.TableCommitter``) of every table are held, in name order,
from finding the rows to delete until the batch landed, so no append can slip in between
(writers that take no slot, a Flight SQL transaction or a REST commit, lose to the
compare-and-swap and the whole batch is rebuilt).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException

from catalog import delete_writer
from catalog.append import COMMIT_ATTEMPTS
from catalog.append_schema import ConcurrentSchemaChangeError, StagedSchema, restage_schema, stage_schema
from catalog.commit_log import CommitRecord
from catalog.commit_requests import AppendResult, key_writes
from catalog.context import commit_context, current_commit_context
from catalog.deletes import plan_files
from catalog.durable_io import DurableFileIO, deferred_fsync, fsync_all, local_paths
from catalog.idempotency import check_key, extra_batch_writes
from catalog.keyed_changes import MERGE_ON_READ, _find, _overwrite, _rewrite_kept, _RowDeltaProducer, _touched_keys
from catalog.quarantine import check_table
from catalog.schema_policy import SchemaMismatchError, plan, policy_of, renamed
from catalog.v3 import refuse_v3_write
from catalog.writer import DataFileWriter, delete_files

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from catalog.append import Appender

logger = logging.getLogger("icefloe.catalog.keyed_tables")


@dataclass
class TableChanges:
    """One table's part of a multi-table change: see ``catalog.keyed_changes.commit_keyed``."""

    identifier: tuple[str, ...]
    upserts: pa.Table
    removed: pa.Table
    key: list[str]
    truncate: bool = False
    idempotency_key: str | None = None
    snapshot_properties: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Prepared:
    """A part whose new rows are written (not yet fsync'd), ready to be built into a snapshot."""

    change: TableChanges
    io: Any
    key: list[str]
    touched: pa.Table
    staged: StagedSchema | None
    files: list[DataFile]
    rows: int
    deleted: int = 0
    attempt_files: list[str] = field(default_factory=list)  # rewritten files / delete files of one attempt


def commit_keyed_tables(appender: Appender, changes: list[TableChanges],
                        schema_policy: str | None = None) -> list[AppendResult]:
    """Apply every table's changes in one catalog commit; return once it is durable (results
    in the order of ``changes``; ``duplicate`` when the first table's idempotency key says the
    commit landed before: the commit is all or nothing, so one key answers for all).

    Raises:
        ValueError: No change, or a table named twice.
        SchemaMismatchError: A table's upserts do not fit it under its schema policy.
        QualityBlocked / ExpectationUnusable: A table's quality gate refused its rows.
        CommitFailedException: The commit kept losing races; nothing landed.
    """
    if not changes:
        raise ValueError("a multi-table change needs at least one table")
    if len({c.identifier for c in changes}) != len(changes):
        raise ValueError("a table appears more than once in one multi-table change")
    for change in changes:
        if change.idempotency_key is not None:
            check_key(change.idempotency_key)
    first = _stored(appender, changes)
    if first is not None:
        return first
    prepared: list[_Prepared] = []
    writers: list[DataFileWriter] = []
    landing: list[bool] = []  # set once the catalog write was tried: whether it landed may be unknown
    try:
        for change in changes:
            prepared.append(_prepare(appender, change, schema_policy, writers))
        order = sorted(prepared, key=lambda p: p.change.identifier)
        with contextlib.ExitStack() as slots:
            for part in order:
                slots.enter_context(appender.committer(tuple(part.change.identifier[:-1]),
                                                       part.change.identifier[-1]).exclusive())
            results = _land_with_retries(appender, prepared, landing)
    except BaseException as exc:
        if landing and not isinstance(exc, CommitFailedException):
            raise  # the batch may have landed: its files are left to orphan removal, never deleted
        for writer in writers:
            writer.abort()
        for part in prepared:
            delete_files(part.io, [f.file_path for f in part.files] + part.attempt_files)
        raise
    finally:
        for writer in writers:
            appender.untrack_writer(writer)
    if results[0].duplicate:
        for part in prepared:
            delete_files(part.io, [f.file_path for f in part.files])
    else:
        for part in prepared:
            written = len(part.files) + len(part.attempt_files)
            if written:
                appender.mark_dirty(tuple(part.change.identifier), written)
    return results


def _stored(appender: Appender, changes: list[TableChanges]) -> list[AppendResult] | None:
    """The results stored for the first table's idempotency key (the commit landed before)."""
    change = changes[0]
    if change.idempotency_key is None:
        return None
    ident = change.identifier
    stored = appender.idempotency.get(tuple(ident[:-1]), ident[-1], change.idempotency_key)
    if stored is None:
        return None
    results = [AppendResult(**{**stored, "duplicate": True})]
    for other in changes[1:]:
        results.append(AppendResult(".".join(other.identifier), stored["commit_seq"], None, 0, duplicate=True))
    return results


def _prepare(appender: Appender, change: TableChanges, schema_policy: str | None,
             writers: list[DataFileWriter]) -> _Prepared:
    """Check one part (v3, quality gate, schema policy, key) and write its new rows."""
    identifier = change.identifier
    qualified = ".".join(identifier)
    table = appender.catalog.load_table(identifier)
    refuse_v3_write(table.metadata, f"change rows of {qualified}")
    # Quarantine acts as block for changes, as in catalog.keyed_changes (one decision per key).
    check_table(appender.quality_gate, appender.catalog, tuple(identifier), table.properties, change.upserts,
                "change rows")
    policy = policy_of(table.properties, schema_policy)
    policy_plan = plan(table.schema(), change.upserts.schema, policy, table.metadata.format_version)
    schema, batches = renamed(change.upserts.schema, change.upserts.to_batches(), policy_plan.renames)
    key = [policy_plan.renames.get(k, k) for k in change.key]
    staged = stage_schema(table, policy_plan) if policy_plan.changes_table else None
    metadata = staged.metadata if staged is not None else table.metadata
    missing = [k for k in key if k not in metadata.schema().column_names]
    if missing:
        raise SchemaMismatchError(f"key column(s) {missing} are not columns of {qualified}")
    touched = _touched_keys(change.upserts, change.removed, key, policy_plan.renames, metadata.schema().as_arrow())
    writer = DataFileWriter(metadata, table.io, schema, policy_plan.required_columns)
    appender.track_writer(writer)
    writers.append(writer)
    files = appender.write_all(writer, schema, batches)
    return _Prepared(change, table.io, key, touched, staged, list(files), writer.rows)


def _land_with_retries(appender: Appender, prepared: list[_Prepared], landing: list[bool]) -> list[AppendResult]:
    """Build every table's snapshot on its current metadata and land them in one batch;
    rebuild all after a lost race (the caller holds every table's slot)."""
    delay = 0.005
    principal = current_commit_context().principal
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        stored = _stored(appender, [p.change for p in prepared])
        if stored is not None:
            return stored
        try:
            with commit_context(principal=principal):
                return _land(appender, prepared, landing)
        except ConcurrentSchemaChangeError:
            raise
        except CommitFailedException:
            for part in prepared:
                delete_files(part.io, part.attempt_files)
                part.attempt_files = []
            if attempt == COMMIT_ATTEMPTS:
                raise
            logger.debug("multi-table change lost a commit race (attempt %d); retrying", attempt)
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
    raise AssertionError("unreachable")


def _land(appender: Appender, prepared: list[_Prepared], landing: list[bool]) -> list[AppendResult]:
    catalog = appender.catalog
    changes: list[Any] = []
    fields: list[dict[str, Any]] = []
    unsynced: list[str] = []
    for part in prepared:
        current = catalog.load_table(part.change.identifier)
        change, more = _build(appender, current, part)
        changes.append(change)
        unsynced.extend(more)
        extra = {**part.change.extra, "row_counts": {"added": part.rows, "deleted": part.deleted}}
        fields.append({"extra": extra})
    landed: dict[tuple[tuple[str, ...], str], CommitRecord] = {}
    synced: list[bool] = []
    by_table = {(tuple(p.change.identifier[:-1]), p.change.identifier[-1]): p for p in prepared}

    def durable_then_keys(record: CommitRecord) -> dict[bytes, bytes]:
        # Called by the catalog for each table's record right before the one RocksDB batch:
        # every file the new metadata names becomes durable first (one fsync round for all).
        if not synced:
            fsync_all(local_paths([*unsynced, *metadata_files]))
            synced.append(True)
        ident = (tuple(record.namespace), record.table)
        part = by_table.get(ident)
        if part is None:
            return {}
        landed[ident] = record
        return key_writes(ident[0], ident[1], record, [(part.change.idempotency_key, part.rows)])

    with deferred_fsync() as metadata_files, extra_batch_writes(durable_then_keys):
        landing.append(True)
        catalog.commit_tables(changes, record_fields=fields)
    results = []
    for part in prepared:
        ident = (tuple(part.change.identifier[:-1]), part.change.identifier[-1])
        record = landed[ident]
        results.append(AppendResult(".".join(part.change.identifier), record.seq, record.snapshot_id, part.rows))
    return results


def _build(appender: Appender, current: Table, part: _Prepared) -> tuple[Any, list[str]]:
    """One table's snapshot on ``current``: the change for ``commit_tables`` and the files it
    names that are not durable yet (the new rows, rewritten files, delete files, manifests)."""
    io = current.io
    if isinstance(io, DurableFileIO):
        io.defer_fsync()
    hits = _find(current, part.touched, part.key, everything=part.change.truncate)
    part.deleted = sum(len(h.positions) for h in hits)
    data_files = list(part.files)
    producer: Any = None
    if part.change.truncate:
        snapshot = current.metadata.current_snapshot()
        gone = [p.data_file for p in plan_files(current.metadata, current.io, snapshot.snapshot_id)
                ] if snapshot is not None else []
        if gone:
            producer = lambda update, _loaded: _overwrite(update, gone)  # noqa: E731
    elif hits:
        use_mor = (str(current.metadata.properties.get("write.delete.mode", "")).strip().lower() == MERGE_ON_READ
                   and part.staged is None and int(current.metadata.format_version) >= 2)
        if use_mor:
            deletes = delete_writer.write_position_deletes(current, [h.data_file for h in hits],
                                                           [h.positions for h in hits], uuid.uuid4())
            part.attempt_files.extend(f.file_path for f in deletes)
            producer = lambda update, loaded: _RowDeltaProducer(update, loaded, deletes)  # noqa: E731
        else:
            kept = _rewrite_kept(appender, current, hits)
            part.attempt_files.extend(f.file_path for f in kept)
            data_files += kept
            removed_files = [h.data_file for h in hits]
            producer = lambda update, _loaded: _overwrite(update, removed_files)  # noqa: E731
    tx = current.transaction()
    if part.staged is not None:
        restage_schema(current, tx, part.staged)
    update = tx.update_snapshot(snapshot_properties=dict(part.change.snapshot_properties))
    with (producer(update, current) if producer is not None else update.fast_append()) as append:
        for data_file in data_files:
            append.append_data_file(data_file)
    unsynced = [f.file_path for f in data_files] + [p for p in part.attempt_files if p not in
                                                   {f.file_path for f in data_files}]
    if isinstance(io, DurableFileIO):
        unsynced.extend(io.take_deferred())
    return (current.name(), tx._requirements, tx._updates), unsynced
