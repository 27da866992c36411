"""Table history in SQL: time travel (``ns.t AT (VERSION => id | TIMESTAMP => ts)``) and the
metadata tables ``ns."t$snapshots"``, ``ns."t$history"`` and ``ns."t$files"``.

Time travel uses DuckDB's own syntax and parser: ``json_serialize_sql`` gives every table
reference with its ``at_clause`` (as an expression tree) and its exact span in the text; the
text is never searched. Each such reference is replaced by a view name that no catalog table
can clash with (``"t@<snapshot id>"``, aliased back to the name the query used), and pinned to
that snapshot with the schema it was written with. The ``AT`` expression must be constant
(literals, casts, ``now() - INTERVAL ...``); DuckDB evaluates it, re-rendered from the checked
tree, under the query's timeout.

Metadata tables are pinned like data tables (at the table's current snapshot when the query
is planned) and materialised as Arrow at execution from the table metadata, limited to what
existed at the pinned snapshot, so a query sees one consistent state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from catalog.deletes import read_delete_manifest
from flight_server import errors
from flight_server.engine import messages, policy
from flight_server.engine.policy import TableReference

METADATA_KINDS = ("snapshots", "history", "files")

SNAPSHOTS_SCHEMA = pa.schema([
    pa.field("snapshot_id", pa.int64(), nullable=False),
    pa.field("parent_id", pa.int64()),
    pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("operation", pa.utf8()),
    pa.field("summary", pa.map_(pa.utf8(), pa.utf8())),
    pa.field("manifest_list", pa.utf8()),
])
HISTORY_SCHEMA = pa.schema([
    pa.field("made_current_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("snapshot_id", pa.int64(), nullable=False),
    pa.field("parent_id", pa.int64()),
    pa.field("is_current_ancestor", pa.bool_(), nullable=False),
])
FILES_SCHEMA = pa.schema([
    pa.field("path", pa.utf8(), nullable=False),
    pa.field("record_count", pa.int64(), nullable=False),
    pa.field("file_size", pa.int64(), nullable=False),
    pa.field("partition", pa.utf8()),
    pa.field("content", pa.utf8(), nullable=False),
    pa.field("file_format", pa.utf8(), nullable=False),
])


@dataclass(frozen=True)
class AtReference:
    """One ``table AT (...)`` reference: where it is in the SQL and what it resolves to."""

    start: int
    end: int
    namespace: tuple[str, ...]
    name: str
    alias: str
    snapshot_id: int
    schema_id: int


def at_view_name(name: str, snapshot_id: int) -> str:
    return f"{name}@{snapshot_id}"


def metadata_table_name(name: str) -> tuple[str, str] | None:
    """``t$snapshots`` -> (``t``, ``snapshots``); None for an ordinary name."""
    base, sep, kind = name.rpartition("$")
    if sep and base and kind in METADATA_KINDS:
        return base, kind
    return None


def resolve_at_references(
    cur: duckdb.DuckDBPyConnection, catalog: Any, refs: list[TableReference], default_schema: tuple[str, ...] | None
) -> list[AtReference]:
    """Resolve each ``AT (...)`` table reference of a checked query to a snapshot of a catalog table.

    The reference, its name and its expression come from DuckDB's parse tree (``policy``); the
    expression must be constant (``policy.check_at_expression``) and is evaluated by DuckDB from
    that tree, re-rendered, on the caller's cursor (which the query watchdog can interrupt).
    """
    out = []
    for ref in refs:
        if ref.at_unit is None:
            continue
        if ref.start < 0 or ref.end <= ref.start:
            raise errors.InvalidArgument("cannot locate the AT clause in the statement")
        *schema_parts, name = ref.parts
        if len(schema_parts) == 2 and schema_parts[0] != "icefloe":
            raise errors.NotFound(f"catalog {schema_parts[0]!r} does not exist (the catalog is 'icefloe')")
        namespace = tuple(schema_parts[-1].split(".")) if schema_parts else default_schema
        if not namespace:
            raise errors.InvalidArgument(f"time travel on {name}: name the namespace (ns.{name}) or set a schema")
        qualified = ".".join((*namespace, name))
        where = f"AT ({ref.at_unit} => ...) of {qualified}"
        if ref.at_unit not in ("VERSION", "TIMESTAMP"):
            raise errors.InvalidArgument(f"AT ({ref.at_unit} => ...) is not supported; use VERSION or TIMESTAMP")
        policy.check_at_expression(ref.at_expr, where)
        try:
            table = catalog.load_table((*namespace, name))
        except (NoSuchTableError, NoSuchNamespaceError, ValueError):
            raise errors.NotFound(f"table {qualified} does not exist") from None
        assert ref.at_expr is not None  # checked above
        snapshot = _resolve(cur, table, qualified, ref.at_unit, policy.render_expression(cur, ref.at_expr))
        schema_id = snapshot.schema_id if snapshot.schema_id is not None else table.metadata.current_schema_id
        out.append(AtReference(ref.start, ref.end, namespace, name, ref.alias or name, snapshot.snapshot_id,
                               schema_id))
    spans = sorted((r.start, r.end) for r in out)
    if any(prev[1] > nxt[0] for prev, nxt in zip(spans, spans[1:], strict=False)):
        raise errors.InvalidArgument("overlapping AT clauses")
    return out


def _resolve(cur: duckdb.DuckDBPyConnection, table: Table, qualified: str, unit: str, select: str) -> Any:
    """The snapshot an AT clause names; ``select`` is a one-column query of its (constant) value."""
    if unit == "VERSION":
        try:
            row = cur.execute(f"SELECT CAST(v AS BIGINT) FROM ({select}) AS at_value(v)").fetchall()[0]
        except duckdb.Error as exc:
            raise errors.InvalidArgument(f"AT (VERSION => ...) of {qualified}: {messages.clean(exc)}") from None
        snapshot_id = row[0] if row else None
        if snapshot_id is None:
            raise errors.InvalidArgument(f"AT (VERSION => ...) of {qualified} is NULL")
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise errors.NotFound(f"table {qualified} has no snapshot {snapshot_id}")
        return snapshot
    try:
        row = cur.execute(f"SELECT epoch_ms(CAST(v AS TIMESTAMPTZ)) FROM ({select}) AS at_value(v)").fetchall()[0]
    except duckdb.Error as exc:
        raise errors.InvalidArgument(f"AT (TIMESTAMP => ...) of {qualified}: {messages.clean(exc)}") from None
    if not row or row[0] is None:
        raise errors.InvalidArgument(f"AT (TIMESTAMP => ...) of {qualified} is NULL")
    entry = None
    for log in table.metadata.snapshot_log:
        if log.timestamp_ms <= row[0]:
            entry = log
    snapshot = table.metadata.snapshot_by_id(entry.snapshot_id) if entry is not None else None
    if snapshot is None:
        when = datetime.fromtimestamp(row[0] / 1000, tz=UTC).isoformat()
        raise errors.NotFound(f"table {qualified} has no snapshot at or before {when}")
    return snapshot


def rewrite(sql: str, refs: list[AtReference], quote: Any, catalog_name: str) -> str:
    """``sql`` with each AT reference replaced by its snapshot's view, aliased as the query named it."""
    encoded = sql.encode("utf-8")
    for ref in sorted(refs, key=lambda r: r.start, reverse=True):
        view = f"{catalog_name}.{quote('.'.join(ref.namespace))}.{quote(at_view_name(ref.name, ref.snapshot_id))}"
        replacement = f"{view} AS {quote(ref.alias)}".encode()
        encoded = encoded[: ref.start] + replacement + encoded[ref.end :]
    return encoded.decode("utf-8")


# -- metadata tables ------------------------------------------------------------------------


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def metadata_table(table: Table, kind: str, snapshot_id: int | None) -> pa.Table:
    """The ``$snapshots`` / ``$history`` / ``$files`` table as of ``snapshot_id``."""
    md = table.metadata
    pinned = md.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    limit_ms = pinned.timestamp_ms if pinned is not None else -1
    if kind == "snapshots":
        rows = []
        for s in md.snapshots:
            if s.timestamp_ms > limit_ms:
                continue
            summary = s.summary
            rows.append({
                "snapshot_id": s.snapshot_id, "parent_id": s.parent_snapshot_id, "committed_at": _ts(s.timestamp_ms),
                "operation": summary.operation.value if summary is not None else None,
                "summary": list(summary.additional_properties.items()) if summary is not None else None,
                "manifest_list": s.manifest_list,
            })
        return pa.Table.from_pylist(rows, SNAPSHOTS_SCHEMA)
    if kind == "history":
        ancestors = set()
        cur = pinned
        while cur is not None:
            ancestors.add(cur.snapshot_id)
            cur = md.snapshot_by_id(cur.parent_snapshot_id) if cur.parent_snapshot_id is not None else None
        rows = []
        for log in md.snapshot_log:
            if log.timestamp_ms > limit_ms:
                continue
            snap = md.snapshot_by_id(log.snapshot_id)
            rows.append({"made_current_at": _ts(log.timestamp_ms), "snapshot_id": log.snapshot_id,
                         "parent_id": snap.parent_snapshot_id if snap is not None else None,
                         "is_current_ancestor": log.snapshot_id in ancestors})
        return pa.Table.from_pylist(rows, HISTORY_SCHEMA)
    if kind == "files":
        if pinned is None:
            return FILES_SCHEMA.empty_table()
        rows = []
        # Every live entry of the snapshot's manifests, data and delete files (delete manifests
        # read with the v3 schema; pyiceberg's planner refuses equality deletes).
        files: list[Any] = []
        snapshot = table.metadata.snapshot_by_id(pinned.snapshot_id)
        for manifest in snapshot.manifests(table.io) if snapshot is not None else []:
            if manifest.content == ManifestContent.DELETES:
                files.extend(e.data_file for e in read_delete_manifest(table.io, manifest))
            else:
                files.extend(e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
        for f in files:
            partition = _partition(table, f)
            rows.append({"path": f.file_path, "record_count": f.record_count, "file_size": f.file_size_in_bytes,
                         "partition": json.dumps(partition) if partition else None,
                         "content": f.content.name.lower(), "file_format": str(f.file_format.value)})
        return pa.Table.from_pylist(rows, FILES_SCHEMA)
    raise errors.NotFound(f"unknown metadata table ${kind}")


def _partition(table: Table, data_file: Any) -> dict[str, Any]:
    """A file's partition values as Iceberg prints them (``ts_day`` -> ``2024-01-01``)."""
    spec = table.specs().get(data_file.spec_id)
    if spec is None:
        return {}
    schema = table.schema()
    values: dict[str, Any] = {}
    for i, field in enumerate(spec.fields):
        value = data_file.partition[i]
        try:
            source_type = schema.find_field(field.source_id).field_type
            values[field.name] = None if value is None else field.transform.to_human_string(source_type, value)
        except ValueError:  # source column dropped since: the raw value
            values[field.name] = None if value is None else str(value)
    return values
