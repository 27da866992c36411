"""Which snapshots hold pipes' checkpoints (kept by snapshot expiry), and that a snapshot's
summary is read once: every commit's snapshot cap looks at every retained snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.table.snapshots import Operation, Snapshot, Summary

from catalog.pipes import checkpoint_snapshots


def _snapshot(snapshot_id: int, **properties: str) -> Snapshot:
    return Snapshot(snapshot_id=snapshot_id, sequence_number=snapshot_id, timestamp_ms=snapshot_id,  # type: ignore[call-arg]
                    manifest_list=f"file:///warehouse/ns/t/metadata/snap-{snapshot_id}.avro",
                    summary=Summary(Operation.APPEND, **properties))


def test_each_pipes_highest_checkpoint_is_kept_and_summaries_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshots = [
        _snapshot(11, **{"icefloe.pipe.a.source-seq": "5"}),
        _snapshot(12, **{"icefloe.pipe.a.source-seq": "9", "icefloe.pipe.b.source-seq": "2"}),
        _snapshot(13, **{"icefloe.pipe.b.source-seq": "not a number", "other": "7"}),
        _snapshot(14),
        _snapshot(15, **{"icefloe.pipe.b.source-seq": "3"}),
    ]
    reads: list[int] = []
    original = Summary.additional_properties

    def counting(self: Summary) -> Any:
        reads.append(1)
        return original.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(Summary, "additional_properties", property(counting))
    assert checkpoint_snapshots(snapshots) == {12, 15}
    assert len(reads) == len(snapshots)
    assert checkpoint_snapshots(snapshots + [_snapshot(16, **{"icefloe.pipe.a.source-seq": "10"})]) == {15, 16}
    assert len(reads) == len(snapshots) + 1  # only the new snapshot's summary was read
