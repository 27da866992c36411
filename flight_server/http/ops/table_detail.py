"""One table for the watch page's table view: ``GET /api/table?table=ns.t``.

Everything comes from the table's current metadata and the current snapshot's summary (Iceberg
keeps running totals there: files, bytes, rows, delete files), so no manifest is read. The last
commit and the last maintenance come from the commit log, newest first, with the same bounded
scan as the history (``history.MAX_SCAN`` records at most: older ones are "not recent").

Nothing here names a server path: the location, metadata files and path-valued properties are
left out, as everywhere on the operator endpoints.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchTableError

from flight_server import errors
from flight_server.http.ops import history

if TYPE_CHECKING:
    from catalog import RocksCatalog

RECENT_SNAPSHOTS = 20
# Summary totals Iceberg keeps per snapshot (what they mean is in the spec's "Snapshot Summary").
_TOTALS = {
    "rows": "total-records", "data_files": "total-data-files", "delete_files": "total-delete-files",
    "bytes": "total-files-size", "position_deletes": "total-position-deletes",
    "equality_deletes": "total-equality-deletes",
}
# Properties an operator tunes maintenance and writes with; path-valued ones are never shown.
_SHOWN_PREFIXES = ("history.expire.", "icefloe.", "write.delete.", "write.update.", "write.merge.",
                   "write.target-file-size", "commit.", "format-version")


def _ms_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _int(summary: dict[str, str], key: str) -> int | None:
    raw = summary.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _shown(key: str) -> bool:
    lowered = key.lower()
    return key.startswith(_SHOWN_PREFIXES) and "path" not in lowered and "location" not in lowered


def detail(catalog: RocksCatalog, table: str) -> dict[str, Any]:
    """The table view of ``table`` (``ns.t``).

    Raises:
        errors.NotFound: No such table.
    """
    try:
        loaded = catalog.load_table(table)
    except NoSuchTableError:
        raise errors.NotFound(f"table {table} does not exist") from None
    metadata = loaded.metadata
    current = metadata.current_snapshot()
    summary = dict(current.summary.additional_properties) if current is not None and current.summary else {}
    totals = {name: (_int(summary, key) if current is not None else 0) for name, key in _TOTALS.items()}
    snapshots = sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms), reverse=True)
    recent = []
    for snapshot in snapshots[:RECENT_SNAPSHOTS]:
        props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        recent.append({
            "snapshot_id": snapshot.snapshot_id, "parent_snapshot_id": snapshot.parent_snapshot_id,
            "committed_at": _ms_iso(snapshot.timestamp_ms), "sequence_number": snapshot.sequence_number,
            "operation": str(snapshot.summary.operation.value) if snapshot.summary is not None else None,
            "added_rows": _int(props, "added-records"), "deleted_rows": _int(props, "deleted-records"),
            "added_files": _int(props, "added-data-files"), "deleted_files": _int(props, "deleted-data-files"),
            "current": current is not None and snapshot.snapshot_id == current.snapshot_id,
        })
    schema = loaded.schema()
    spec = loaded.spec()
    last = history.page(catalog, None, 1, table, None)["commits"]
    last_maintenance = history.page(catalog, None, 1, table, history.MAINTENANCE)["commits"]
    return {
        "name": table,
        "table_uuid": str(metadata.table_uuid),
        "format_version": metadata.format_version,
        "snapshot_id": current.snapshot_id if current is not None else None,
        **totals,
        "snapshot_count": len(metadata.snapshots),
        "snapshots": recent,
        "schema": {
            "schema_id": schema.schema_id,
            "fields": [{"id": f.field_id, "name": f.name, "type": str(f.field_type), "required": f.required}
                       for f in schema.fields],
        },
        "partitioning": [{"name": f.name, "transform": str(f.transform), "source_id": f.source_id}
                         for f in spec.fields],
        "properties": {k: v for k, v in sorted(metadata.properties.items()) if _shown(k)},
        "last_updated": _ms_iso(metadata.last_updated_ms),
        "last_commit": last[0] if last else None,
        "last_maintenance": last_maintenance[0] if last_maintenance else None,
    }
