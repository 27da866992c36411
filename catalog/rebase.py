"""Rebase a maintenance snapshot staged on an older version onto the appends since.

Compaction and manifest merges are staged by a worker against one version of a table, and
staging takes far longer than an append (it reads and writes manifests). Staging inside the
table's commit slot made every append wait for it — the tail of the append latency. They are
staged outside the slot now, and by the time the slot is taken, appends have usually landed.

Appends only ever add manifests: the manifests the staged snapshot started from are all still
in the current snapshot, untouched, and the appends' own manifests hold none of the files the
maintenance snapshot removes. So the staged snapshot stays right on the current version if its
manifest list also carries the appends' manifests. ``rebase`` writes that one manifest list
(and renumbers the staged snapshot's own manifests to the new sequence number), which costs
about what an append's manifest list costs; the staged manifests and data files are reused.

Anything but appends in between (an overwrite, delete, another maintenance commit, a schema or
spec change) makes ``rebase`` decline: the caller stages again on the current version.
"""

from __future__ import annotations

import logging
import time
import uuid
from copy import copy

from pyiceberg.manifest import UNASSIGNED_SEQ, ManifestFile, write_manifest_list
from pyiceberg.table import CommitTableRequest, Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)

from catalog.writer import delete_files

logger = logging.getLogger("icefloe.catalog.rebase")

# Snapshot-summary totals that appends move: the rebased snapshot's are the staged ones plus
# what the appends since added.
_TOTALS = (
    "total-records",
    "total-files-size",
    "total-data-files",
    "total-delete-files",
    "total-position-deletes",
    "total-equality-deletes",
)
# How many snapshots back the walk from the current version to the staged base may go.
_MAX_WALK = 10_000


def rebase(current: Table, base: Table, request_json: str) -> str | None:
    """The staged commit ``request_json`` (staged on ``base``) made to apply on ``current``.

    Args:
        current: The table's version now (the caller holds the table's commit slot).
        base: The version the request was staged on.
        request_json: A ``CommitTableRequest`` adding one snapshot on top of ``base``'s
            current snapshot and pointing ``main`` at it.

    Returns:
        The request unchanged when the table is still at ``base``; a rebased request when only
        appends landed since; None when it cannot be rebased (stage it again instead).
    """
    base_snapshot, current_snapshot = base.current_snapshot(), current.current_snapshot()
    if base_snapshot is None or current_snapshot is None:
        return None
    if current_snapshot.snapshot_id == base_snapshot.snapshot_id:
        return request_json if current.metadata.table_uuid == base.metadata.table_uuid else None
    request = CommitTableRequest.model_validate_json(request_json)
    staged = _staged_snapshot(request)
    if staged is None or staged.parent_snapshot_id != base_snapshot.snapshot_id or staged.summary is None:
        return None
    metadata = current.metadata
    if (
        metadata.format_version != 2  # v3 row lineage would need the row ids re-assigned
        or metadata.table_uuid != base.metadata.table_uuid
        or metadata.current_schema_id != base.metadata.current_schema_id
        or metadata.default_spec_id != base.metadata.default_spec_id
        or not _only_appends_between(current, current_snapshot, base_snapshot.snapshot_id)
    ):
        return None
    io = current.io
    base_manifests = {m.manifest_path for m in base_snapshot.manifests(io)}
    current_manifests = current_snapshot.manifests(io)
    current_paths = {m.manifest_path for m in current_manifests}
    if not base_manifests <= current_paths:
        return None  # something rewrote a manifest the staged snapshot started from
    appended = [m for m in current_manifests if m.manifest_path not in base_manifests]
    totals = _totals_after(staged.summary, base_snapshot.summary, current_snapshot.summary)
    if totals is None:
        return None
    sequence_number = metadata.next_sequence_number()
    manifests = [*appended, *(_renumbered(m, staged) for m in staged.manifests(io))]
    path = current.location_provider().new_metadata_location(
        f"snap-{staged.snapshot_id}-1-{uuid.uuid4()}.avro"
    )
    compression = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    with write_manifest_list(
        format_version=2,
        output_file=io.new_output(path),
        snapshot_id=staged.snapshot_id,
        parent_snapshot_id=current_snapshot.snapshot_id,
        sequence_number=sequence_number,
        avro_compression=compression,  # type: ignore[arg-type]
    ) as writer:
        writer.add_manifests(manifests)
    snapshot = Snapshot(  # type: ignore[call-arg]
        snapshot_id=staged.snapshot_id,
        parent_snapshot_id=current_snapshot.snapshot_id,
        sequence_number=sequence_number,
        timestamp_ms=max(int(time.time() * 1000), metadata.last_updated_ms),
        manifest_list=path,
        summary=Summary(staged.summary.operation, **{**staged.summary.additional_properties, **totals}),
        schema_id=staged.schema_id,
    )
    rebased = CommitTableRequest(
        identifier=request.identifier,
        requirements=(
            AssertTableUUID(uuid=metadata.table_uuid),
            AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=current_snapshot.snapshot_id),  # type: ignore[call-arg]
        ),
        updates=(
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(  # type: ignore[call-arg]
                ref_name=MAIN_BRANCH,
                type=SnapshotRefType.BRANCH,
                snapshot_id=snapshot.snapshot_id,
                parent_snapshot_id=current_snapshot.snapshot_id,
            ),
        ),
    )
    delete_files(io, [staged.manifest_list])  # superseded; orphan removal takes it otherwise
    logger.debug("rebased a staged %s over %d appended manifests", staged.summary.operation.value, len(appended))
    return rebased.model_dump_json()


def _staged_snapshot(request: CommitTableRequest) -> Snapshot | None:
    """The snapshot of a request that adds exactly one and points ``main`` at it."""
    adds = [u for u in request.updates if isinstance(u, AddSnapshotUpdate)]
    refs = [u for u in request.updates if isinstance(u, SetSnapshotRefUpdate)]
    if len(adds) != 1 or len(refs) != 1 or len(request.updates) != 2:
        return None
    snapshot = adds[0].snapshot
    if refs[0].ref_name != MAIN_BRANCH or refs[0].snapshot_id != snapshot.snapshot_id:
        return None
    return snapshot


def _only_appends_between(table: Table, newest: Snapshot, base_id: int) -> bool:
    """Whether every snapshot after ``base_id`` up to ``newest`` is an append."""
    snapshot: Snapshot | None = newest
    for _ in range(_MAX_WALK):
        if snapshot is None or snapshot.summary is None:
            return False
        if snapshot.snapshot_id == base_id:
            return True
        if snapshot.summary.operation != Operation.APPEND or snapshot.parent_snapshot_id is None:
            return False
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return False


def _totals_after(staged: Summary, base: Summary | None, current: Summary | None) -> dict[str, str] | None:
    if base is None or current is None:
        return None
    totals: dict[str, str] = {}
    for name in _TOTALS:
        values = (staged[name], base[name], current[name])
        if all(v is None for v in values):
            continue
        try:
            s, b, c = (int(v) for v in values)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        totals[name] = str(s + c - b)
    return totals


def _renumbered(manifest: ManifestFile, staged: Snapshot) -> ManifestFile:
    """A manifest the staged snapshot wrote, with its sequence numbers left for the manifest
    list writer to assign (the new snapshot's); the ones it carried over stay as they are."""
    if manifest.added_snapshot_id != staged.snapshot_id:
        return manifest
    renumbered = copy(manifest)
    if renumbered.sequence_number == staged.sequence_number:
        renumbered.sequence_number = UNASSIGNED_SEQ
    if renumbered.min_sequence_number == staged.sequence_number:
        renumbered.min_sequence_number = UNASSIGNED_SEQ
    return renumbered

