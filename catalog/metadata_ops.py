"""Applying table updates and describing what a commit did.

``pyiceberg.table.update.update_table_metadata`` ends with ``model_copy(deep=True)`` of the
whole metadata, whose cost grows with every snapshot and metadata-log entry. The catalog keeps
metadata immutable and cached, so a deep copy buys nothing: this module applies the same
per-update functions and validations without it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AddSnapshotUpdate,
    RemovePropertiesUpdate,
    RemoveSnapshotsUpdate,
    SetCurrentSchemaUpdate,
    SetPropertiesUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis

from catalog.fresh_ids import renumber
from catalog.pipes import checkpoint_snapshots

# Table property: how many snapshots a commit that adds one keeps (0 turns expiry off).
SNAPSHOTS_RETAIN = "icefloe.snapshots.retain"
DEFAULT_SNAPSHOTS_RETAIN = 100


def apply_updates(
    base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str | None, creating: bool
) -> TableMetadata:
    """Return ``base`` with ``updates`` applied (``base`` itself is never modified)."""
    context = _TableMetadataUpdateContext()
    metadata = _with_row_ids(base)
    for update in renumber(base, updates):  # ids of added schemas, specs, orders: as Iceberg assigns
        if isinstance(update, RemovePropertiesUpdate) and not set(update.removals) <= metadata.properties.keys():
            # Removing a property that is not set is a no-op in Iceberg (Java's TableMetadata
            # builder); pyiceberg's apply raises KeyError, which would be a 500 over REST.
            update = RemovePropertiesUpdate(removals=[key for key in update.removals if key in metadata.properties])
        if isinstance(update, UpgradeFormatVersionUpdate) and update.format_version == V3 > metadata.format_version:
            metadata = _with_row_ids(_upgraded_to_v3(metadata, context))
            context.add_update(update)
            continue
        metadata = _with_row_ids(_apply_table_update(update, metadata, context))
    if context.has_changes():
        if metadata_location:
            metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    if creating:
        # A new table is built from an empty V1 shell; re-parse to get the right version class.
        return TableMetadataUtil.parse_obj(metadata.model_dump())
    return metadata


V3 = 3


def _upgraded_to_v3(metadata: TableMetadata, context: _TableMetadataUpdateContext) -> TableMetadata:
    """``metadata`` as format v3 (via v2, which pyiceberg's own update makes). pyiceberg 0.12
    refuses ``upgrade-format-version`` 3 although it reads and writes v3 metadata; icefloe
    serves v3 tables other engines write (its own writers refuse them, see ``catalog.v3``), and
    Iceberg-Java's create transactions of v3 tables send this update."""
    if metadata.format_version < 2:
        metadata = _apply_table_update(UpgradeFormatVersionUpdate(format_version=2), metadata, context)  # type: ignore[call-arg]
    return TableMetadataUtil._construct_without_validation(metadata.model_copy(update={"format_version": V3}))


def _with_row_ids(metadata: TableMetadata) -> TableMetadata:
    """A v3 table's ``next-row-id`` starts at 0: pyiceberg leaves it unset on a new table, and
    an unset value would never advance as snapshots add rows (row lineage: each snapshot's
    ``first-row-id`` is the table's next-row-id when it is added, which then grows by the
    snapshot's ``added-rows``)."""
    if metadata.format_version >= 3 and getattr(metadata, "next_row_id", 0) is None:
        return metadata.model_copy(update={"next_row_id": 0})
    return metadata


def snapshots_to_retain(metadata: TableMetadata) -> int:
    raw = metadata.properties.get(SNAPSHOTS_RETAIN)
    try:
        return int(raw) if raw is not None else DEFAULT_SNAPSHOTS_RETAIN
    except ValueError:
        raise ValueError(f"table property {SNAPSHOTS_RETAIN} must be an integer, got {raw!r}") from None


def expire_snapshots(
    metadata: TableMetadata, retain: int, protected: set[int] | frozenset[int] = frozenset()
) -> TableMetadata:
    """Drop the oldest snapshots so that at most ``retain`` remain (``retain`` <= 0: keep all).

    Snapshots that a branch or tag points at, each pipe's checkpoint snapshot, and
    ``protected`` ones (pinned by query tickets), are never dropped. This only edits metadata:
    files are not deleted here, because another process may be reading an older snapshot
    right now. In an append-only table nothing becomes unreferenced except the expired
    snapshots' manifest lists (later snapshots' manifest lists carry every manifest
    forward); after overwrites and deletes, data files only the expired snapshots used are
    left for maintenance (orphan removal) to delete.
    """
    excess = len(metadata.snapshots) - retain
    if retain <= 0 or excess <= 0:
        return metadata
    referenced = {ref.snapshot_id for ref in metadata.refs.values()} | set(protected)
    referenced |= checkpoint_snapshots(metadata.snapshots)
    oldest_first = sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    expired = [s.snapshot_id for s in oldest_first if s.snapshot_id not in referenced][:excess]
    if not expired:
        return metadata
    update = RemoveSnapshotsUpdate(snapshot_ids=expired)  # type: ignore[call-arg]
    return _apply_table_update(update, metadata, _TableMetadataUpdateContext())


def snapshot_counts(summary: Any) -> dict[str, Any]:
    """What one snapshot changed as a reader sees it, from its summary.

    Rows: a copy-on-write commit removes whole data files (``deleted-records``) and re-adds the
    rows that survive (``added-records``): those carried-over rows are neither added nor
    deleted, so a DELETE of 120 rows from a 600-row file counts -120, not +480 / -600. Where
    one commit both rewrites and adds (a copy-on-write UPDATE), the summary cannot tell an
    updated row from a carried-over one: the counts then give the true net change. Merge-on-read
    deletes count their delete rows: ``added-position-deletes`` (also deletion vectors) and
    ``added-equality-deletes``, less the ``removed-`` ones (a deletion vector replaced by a
    larger one, delete files dropped). A ``replace`` (compaction) changes no row.
    Files: data files added and removed, plus delete files added and removed.
    """
    operation = str(summary.operation.value) if summary is not None else "append"
    added = _summary_int(summary, "added-records") or 0
    removed = _summary_int(summary, "deleted-records") or 0
    positions = (_summary_int(summary, "added-position-deletes") or 0) - (
        _summary_int(summary, "removed-position-deletes") or 0)
    equality = (_summary_int(summary, "added-equality-deletes") or 0) - (
        _summary_int(summary, "removed-equality-deletes") or 0)
    files_added = (_summary_int(summary, "added-data-files") or 0) + (_summary_int(summary, "added-delete-files") or 0)
    files_removed = (_summary_int(summary, "deleted-data-files") or 0) + (
        _summary_int(summary, "removed-delete-files") or 0)
    if operation == "replace":
        return {"added_rows": 0, "deleted_rows": 0, "added_files": files_added, "removed_files": files_removed,
                "data_change": False}
    carried = min(added, removed)
    return {
        "added_rows": added - carried,
        "deleted_rows": removed - carried + max(positions, 0) + max(equality, 0),
        "added_files": files_added,
        "removed_files": files_removed,
        "data_change": True,
    }


def _summary_int(summary: Any, key: str) -> int | None:
    if summary is None:
        return None
    value = summary.get(key) if hasattr(summary, "get") else None
    return int(value) if value is not None else None


def describe_commit(updates: tuple[TableUpdate, ...], new: TableMetadata) -> dict[str, Any]:
    """Commit-log fields (operation, snapshot ids, row and file counts) for a metadata change."""
    info: dict[str, Any] = {"operation": "update"}
    kinds = {type(u) for u in updates}
    snapshot_updates = [u for u in updates if isinstance(u, AddSnapshotUpdate)]
    if snapshot_updates:
        # One commit can add several snapshots: pyiceberg's overwrite is a delete snapshot
        # followed by an append snapshot. Describe the commit as a whole, not its last step.
        snapshots = [u.snapshot for u in snapshot_updates]
        operations = {str(s.summary.operation.value) if s.summary is not None else "append" for s in snapshots}
        if len(operations) == 1:
            operation = operations.pop()
        elif operations <= {"append", "delete", "overwrite"}:
            operation = "overwrite"
        else:
            operation = "replace" if "replace" in operations else "overwrite"
        counts = [snapshot_counts(s.summary) for s in snapshots]
        info.update(
            operation=operation,
            snapshot_id=snapshots[-1].snapshot_id,
            parent_snapshot_id=snapshots[0].parent_snapshot_id,
            added_rows=sum(c["added_rows"] for c in counts),
            deleted_rows=sum(c["deleted_rows"] for c in counts),
            added_files=sum(c["added_files"] for c in counts),
            removed_files=sum(c["removed_files"] for c in counts),
            data_change=any(c["data_change"] for c in counts),
        )
        return info
    info["data_change"] = False  # no snapshot added: no row changed
    if kinds & {AddSchemaUpdate, SetCurrentSchemaUpdate}:
        info["operation"] = "schema"
    elif kinds & {SetPropertiesUpdate, RemovePropertiesUpdate}:
        info["operation"] = "properties"
    elif kinds & {RemoveSnapshotsUpdate}:
        info["operation"] = "expire"
    current = new.current_snapshot()
    if current is not None:
        info["snapshot_id"] = current.snapshot_id
        info["parent_snapshot_id"] = current.parent_snapshot_id
    return info
