"""Row-level changes by primary key in one commit: what a CDC source transaction becomes.

A change-data-capture connector hands over, per source transaction (or a run of whole ones),
the final image of every key it touched: ``upserts`` (rows whose key now has these values)
and ``removed`` (keys that no longer exist). Applying them is: every live target row whose key
is touched is deleted, then the upserts are appended. That is the same whether the change was
an insert, an update or a delete, and it converges when a change is applied twice (the CDC
snapshot overlaps the stream by design, see ``icefloe.ingest.postgres_cdc``).

The deletes follow the table's ``write.delete.mode`` like SQL DELETE does
(``flight_server.sqlwrite``): ``merge-on-read`` writes position delete files
(``catalog.delete_writer``), ``copy-on-write`` (the default) rewrites the data files that
hold touched rows without them. Either way the deletes, the appended rows, the snapshot
summary properties (the connector's checkpoint) and the idempotency key land in ONE catalog
commit, through the appender's commit slot of the table (``catalog.append``): the rows found
to delete are found inside that slot, so no append can slip in between finding and deleting.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile
from pyiceberg.types import DecimalType, IntegerType, LongType, StringType

from catalog import delete_writer
from catalog.append_schema import stage_schema
from catalog.commit_requests import AppendResult, CommitRequest
from catalog.context import current_commit_context
from catalog.delete_reads import bind, file_batches
from catalog.deletes import DeleteSets, FileDeletes, plan_files
from catalog.idempotency import check_key
from catalog.quarantine import check_table
from catalog.schema_policy import SchemaMismatchError, plan, policy_of, renamed
from catalog.v3 import refuse_v3_write
from catalog.writer import DataFileWriter, delete_files

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from catalog.append import Appender

MERGE_ON_READ = "merge-on-read"
# Key types whose bounds decode (pyiceberg.conversions) to the Python values Arrow gives.
_PRUNABLE = (IntegerType, LongType, StringType, DecimalType)
_POS = "__icefloe_pos"


class _Hit(NamedTuple):
    """A live data file holding touched rows: its deletes, and the rows' sorted positions."""

    data_file: DataFile
    deletes: FileDeletes | None
    positions: np.ndarray


def commit_keyed(
    appender: Appender, identifier: tuple[str, ...], upserts: pa.Table, removed: pa.Table, key: list[str],
    idempotency_key: str | None = None, snapshot_properties: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None, schema_policy: str | None = None, truncate: bool = False,
) -> AppendResult:
    """Delete every live row whose ``key`` is in ``upserts`` or ``removed`` (``truncate``: every
    live row, whatever its key: a TRUNCATE at the source), append ``upserts``; one commit.
    Returns once it is durable.

    Raises:
        SchemaMismatchError: The upserts do not fit the table under its schema policy, or a key
            column is not a column of the table.
        CommitFailedException: The commit kept losing races.
    """
    namespace, name = tuple(identifier[:-1]), identifier[-1]
    if idempotency_key is not None:
        check_key(idempotency_key)
    table = appender.catalog.load_table(identifier)
    refuse_v3_write(table.metadata, f"change rows of {'.'.join(identifier)}")
    if idempotency_key is not None:
        first = appender.idempotency.get(namespace, name, idempotency_key)
        if first is not None:
            return AppendResult(**{**first, "duplicate": True})
    # The table's quality expectations hold for the rows a change writes, as for every other
    # write. Quarantine acts as block: a change's deletes and its new rows are one decision,
    # and dropping a failing new version while deleting the old one would lose the row.
    check_table(appender.quality_gate, appender.catalog, tuple(identifier), table.properties, upserts,
                "change rows")
    policy = policy_of(table.properties, schema_policy)
    policy_plan = plan(table.schema(), upserts.schema, policy, table.metadata.format_version)
    schema, batches = renamed(upserts.schema, upserts.to_batches(), policy_plan.renames)
    key = [policy_plan.renames.get(k, k) for k in key]
    staged = stage_schema(table, policy_plan) if policy_plan.changes_table else None
    metadata = staged.metadata if staged is not None else table.metadata
    missing = [k for k in key if k not in metadata.schema().column_names]
    if missing:
        raise SchemaMismatchError(f"key column(s) {missing} are not columns of {'.'.join(identifier)}")
    touched = _touched_keys(upserts, removed, key, policy_plan.renames, metadata.schema().as_arrow())
    writer = DataFileWriter(metadata, table.io, schema, policy_plan.required_columns)
    appender.track_writer(writer)
    written: list[str] = []
    try:
        files = appender.write_all(writer, schema, batches)
        written += [f.file_path for f in files]
        request = CommitRequest(list(files), writer.rows, idempotency_key, current_commit_context().principal,
                           staged_schema=staged, snapshot_properties=dict(snapshot_properties or {}),
                           extra=dict(extra or {}))
        counts = {"added": writer.rows, "deleted": 0}
        request.extra["row_counts"] = counts

        def prepare() -> None:  # in the table's commit slot: nothing else commits meanwhile
            current = appender.catalog.load_table(identifier)
            hits = _find(current, touched, key, everything=truncate)
            counts["deleted"] = sum(len(h.positions) for h in hits)
            if truncate:
                # Every data file goes, whole (rows already deleted or not): nothing to rewrite.
                snapshot = current.metadata.current_snapshot()
                gone = [p.data_file for p in plan_files(current.metadata, current.io, snapshot.snapshot_id)
                        ] if snapshot is not None else []
                request.producer = (lambda update, _loaded: _overwrite(update, gone)) if gone else None
                return
            if not hits:
                request.producer = None
                return
            use_mor = (str(current.metadata.properties.get("write.delete.mode", "")).strip().lower() == MERGE_ON_READ
                       and staged is None and int(current.metadata.format_version) >= 2)
            if use_mor:
                deletes = delete_writer.write_position_deletes(
                    current, [h.data_file for h in hits], [h.positions for h in hits], uuid.uuid4())
                written.extend(f.file_path for f in deletes)
                request.producer = lambda update, loaded: _RowDeltaProducer(update, loaded, deletes)
                return
            kept = _rewrite_kept(appender, current, hits)
            written.extend(f.file_path for f in kept)
            request.data_files = [*files, *kept]
            removed_files = [h.data_file for h in hits]
            request.producer = lambda update, _loaded: _overwrite(update, removed_files)

        request.prepare = prepare
        result = appender.committer(namespace, name).submit(request)
    except BaseException:
        writer.abort()
        delete_files(table.io, written)
        raise
    finally:
        appender.untrack_writer(writer)
    if result.duplicate:
        delete_files(table.io, written)
    elif request.data_files:
        appender.mark_dirty(tuple(identifier), len(request.data_files))
    return result


def _touched_keys(upserts: pa.Table, removed: pa.Table, key: list[str], renames: dict[str, str],
                  target: pa.Schema) -> pa.Table:
    """The distinct keys ``upserts`` and ``removed`` name, typed as the target's key columns."""
    parts = []
    for rows in (upserts, removed):
        if rows.num_rows:
            names = [renames.get(n, n) for n in rows.column_names]
            rows = rows.rename_columns(names).select(key)
            parts.append(pa.table([rows.column(k).cast(target.field(k).type) for k in key], names=key))
    if not parts:
        return pa.table({k: pa.array([], target.field(k).type) for k in key})
    both = pa.concat_tables(parts)
    return both.group_by(key).aggregate([])


def _find(table: Table, touched: pa.Table, key: list[str], everything: bool = False) -> list[_Hit]:
    """Each live data file holding a visible row with a touched key (``everything``: any
    visible row), and those rows' sorted positions in the file (positions count the file as
    written, before its deletes)."""
    snapshot = table.metadata.current_snapshot()
    if snapshot is None or (touched.num_rows == 0 and not everything):
        return []
    schema = table.schema()
    key_schema = schema.select(*key)
    sets = DeleteSets()
    names = {f.field_id: f.name for f in schema.fields}
    found = []
    lookup = touched.column(key[0]).combine_chunks() if len(key) == 1 else None
    may_hold = (lambda _f: True) if everything else _key_range_filter(schema, key[0], touched.column(key[0]))
    for planned in plan_files(table.metadata, table.io, snapshot.snapshot_id):
        if not may_hold(planned.data_file):
            continue  # the file's key range (manifest stats) holds no touched key: not read
        bound = bind(table.io, sets, planned.deletes, planned.data_file.file_path) if planned.deletes else None
        read = key_schema
        if bound is not None and bound.columns_needed(names) - set(key):
            # Equality deletes on other columns than the key: read those columns too.
            wanted = bound.columns_needed(names) | set(key)
            read = schema.select(*[n for n in schema.column_names if n in wanted])
        hits: list[np.ndarray] = []
        position = 0
        for batch in file_batches(table.io, planned.data_file, read, read.as_arrow()):
            n = batch.num_rows
            positions = np.arange(position, position + n, dtype=np.int64)
            mask = bound.keep(batch, position, names) if bound is not None else None
            position += n
            if mask is not None:
                batch, positions = batch.filter(pa.array(mask)), positions[mask]
            if not batch.num_rows:
                continue
            if everything:
                hits.append(positions)
            elif lookup is not None:  # one key column: a hash lookup, no join plan
                mask = pc.is_in(batch.column(key[0]), value_set=lookup).to_numpy(zero_copy_only=False)
                if mask.any():
                    hits.append(positions[mask])
            else:
                tagged = pa.table([*(batch.column(k) for k in key), pa.array(positions)], names=[*key, _POS])
                matched = tagged.join(touched, keys=key, join_type="left semi")
                if matched.num_rows:
                    hits.append(matched.column(_POS).to_numpy())
        if hits:
            found.append(_Hit(planned.data_file, planned.deletes, np.sort(np.concatenate(hits))))
    return found


def _key_range_filter(schema: Any, column: str, touched: pa.ChunkedArray) -> Callable[[DataFile], bool]:
    """Whether a data file may hold one of the ``touched`` values of key ``column``, from the
    lower / upper bounds its manifest entry records (Iceberg's column metrics). A file without
    bounds, or a key of a type whose bounds are not compared here, may hold anything. With
    a multi-column key the first column alone prunes (a necessary condition)."""
    field = schema.find_field(column)
    if not isinstance(field.field_type, _PRUNABLE):
        return lambda _f: True
    values = sorted(v for v in touched.to_pylist() if v is not None)
    field_id, field_type = field.field_id, field.field_type

    def may_hold(data_file: DataFile) -> bool:
        lower = (data_file.lower_bounds or {}).get(field_id)
        upper = (data_file.upper_bounds or {}).get(field_id)
        if lower is None or upper is None:
            return True
        # Truncated string bounds stay bounds: a prefix below, an incremented prefix above.
        at = bisect.bisect_left(values, from_bytes(field_type, lower))
        return at < len(values) and values[at] <= from_bytes(field_type, upper)

    return may_hold


def _rewrite_kept(appender: Appender, table: Table, hits: list[_Hit]) -> list[DataFile]:
    """Copy-on-write: the visible rows of the hit files that are not touched, as new files."""
    schema = table.schema()
    target = schema.as_arrow()
    sets = DeleteSets()
    names = {f.field_id: f.name for f in schema.fields}
    writer = DataFileWriter(table.metadata, table.io, target)
    appender.track_writer(writer)
    try:
        for data_file, deletes, positions in hits:
            bound = bind(table.io, sets, deletes, data_file.file_path) if deletes else None
            start = 0
            for batch in file_batches(table.io, data_file, schema, target):
                n = batch.num_rows
                keep = np.ones(n, dtype=bool)
                if bound is not None:
                    mask = bound.keep(batch, start, names)
                    if mask is not None:
                        keep &= mask
                lo, hi = np.searchsorted(positions, [start, start + n])
                keep[positions[lo:hi] - start] = False
                start += n
                if keep.any():
                    writer.write(batch.filter(pa.array(keep)))
        return writer.finish(sync=False)
    except BaseException:
        writer.abort()
        raise
    finally:
        appender.untrack_writer(writer)


def _overwrite(update: Any, removed_files: list[DataFile]) -> Any:
    producer = update.overwrite()
    for data_file in removed_files:
        producer.delete_data_file(data_file)
    return producer


class _RowDeltaProducer:
    """Looks like a pyiceberg snapshot producer to the appender (``append_data_file`` in a
    ``with``), and commits a row delta: ``deletes`` plus the appended data files, with the
    summary properties the appender gave ``update``."""

    def __init__(self, update: Any, table: Table, deletes: list[DataFile]) -> None:
        self._transaction = update._transaction
        self._properties = dict(update._snapshot_properties)
        self._table = table
        self._deletes = deletes
        self._data: list[DataFile] = []

    def __enter__(self) -> _RowDeltaProducer:
        return self

    def append_data_file(self, data_file: DataFile) -> None:
        self._data.append(data_file)

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:
            return
        delta = delete_writer.row_delta(self._table, self._deletes, self._data, uuid.uuid4(), self._properties)
        self._transaction._apply(delta.updates, delta.requirements)
