"""A pipe's checkpoint survives snapshot expiry: paused past the retention window while other
writers (and compaction) moved its sink on, the restarted pipe resumes at its place, every
source row in the sink exactly once.

Before checkpoint snapshots were kept, expiry removed the snapshot holding the checkpoint:
the restart then raised ``CheckpointLost`` (start "earliest", its first key still retained),
or silently skipped rows (start "latest") or replayed them (a seq, or keys past retention)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

import icefloe
from catalog.append import Appender
from catalog.maintenance import expire_snapshots
from catalog.metadata_ops import expire_snapshots as trim_metadata

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])
OTHER = 1_000_000  # ids the other writer appends to the sink


def _source_rows(source: icefloe.Table, first: int, count: int) -> None:
    for c in range(first, first + count):
        ids = list(range(c * 3, c * 3 + 3))
        source.append(pa.table({"id": ids, "v": ids}, schema=SCHEMA))


@pytest.mark.parametrize("start", ["earliest", "latest"])
def test_a_paused_pipe_resumes_after_its_checkpoint_snapshot_would_have_expired(tmp_path: Path, start: str) -> None:
    with icefloe.open(tmp_path / "warehouse") as lake:
        lake.create_namespace("ns")
        source = lake.create_table("ns.src", schema=SCHEMA)
        sink = lake.create_table("ns.dst", schema=SCHEMA)
        _source_rows(source, 0, 4)
        first_start = "earliest" if start == "earliest" else lake.head() - 4  # both see all four
        icefloe.pipe(source=source, sink=sink, checkpoint="job", once=True, start=first_start)
        # The pipe pauses; another writer lands 5 commits on the sink, the source gets 3 more.
        for k in range(5):
            sink.append(pa.table({"id": [OTHER + k], "v": [0]}, schema=SCHEMA))
        _source_rows(source, 4, 3)
        catalog = lake.backend.catalog  # type: ignore[attr-defined]
        # Expiry long after the retention window: everything but the current snapshot may go.
        expired = expire_snapshots(Appender(catalog), ("ns", "dst"), now_ms=int(time.time() * 1000) + 10**9)
        assert expired == 4  # the other writer's older snapshots, not the checkpoint (nor the current one)
        assert icefloe.checkpoint_of(sink, "job") is not None
        stats = icefloe.pipe(source=source, sink=sink, checkpoint="job", once=True, start=start)
        assert stats.source_rows == 9
        ids = sorted(sink.scan(columns=["id"]).to_table().column("id").to_pylist())
        assert ids == list(range(21)) + [OTHER + k for k in range(5)], "a source row is missing or duplicated"


def test_the_commit_paths_snapshot_cap_keeps_checkpoint_snapshots(tmp_path: Path) -> None:
    from catalog.pipes import checkpoint_snapshots

    with icefloe.open(tmp_path / "warehouse") as lake:
        lake.create_namespace("ns")
        source = lake.create_table("ns.src", schema=SCHEMA)
        sink = lake.create_table("ns.dst", schema=SCHEMA)
        _source_rows(source, 0, 2)
        icefloe.pipe(source=source, sink=sink, checkpoint="a", once=True)
        for k in range(3):
            sink.append(pa.table({"id": [OTHER + k], "v": [0]}, schema=SCHEMA))
        table = lake.backend.catalog.load_table(("ns", "dst"))  # type: ignore[attr-defined]
        kept = checkpoint_snapshots(table.metadata.snapshots)
        assert len(kept) == 1
        trimmed = trim_metadata(table.metadata, retain=1)
        assert {s.snapshot_id for s in trimmed.snapshots} == kept | {table.metadata.current_snapshot_id}
