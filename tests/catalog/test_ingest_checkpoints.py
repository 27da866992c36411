"""Ingest checkpoints in snapshot summaries: the highest step wins, unreadable ones are refused
(never a silent restart from the beginning), sizes and names are bounded."""

from __future__ import annotations

import pytest

from catalog.ingest_checkpoints import (
    MAX_CHECKPOINT_BYTES,
    IngestCommit,
    InvalidIngestCommit,
    backfill_name,
    checkpoint_from_summaries,
)


def props(commit: IngestCommit) -> dict[str, str]:
    return commit.snapshot_properties()


def test_the_highest_step_wins_whatever_the_snapshot_order() -> None:
    first = IngestCommit("c", 0, {"a": "1"}, ("file", "/x"))
    second = IngestCommit("c", 1, {"a": "2", "b": "1"}, ("file", "/x"))
    other = IngestCommit("d", 0, {"z": "9"}, ("file", "/y"))
    found = checkpoint_from_summaries("c", [(2, props(second)), (1, props(first)), (3, props(other)), (4, {})])
    assert (found.step, found.positions, found.snapshot_id) == (2, {"a": "2", "b": "1"}, 2)
    assert checkpoint_from_summaries("e", [(1, props(first))]).step == 0


def test_an_unreadable_checkpoint_is_refused() -> None:
    summary = {"icefloe.ingest.c.step": "3", "icefloe.ingest.c.checkpoint": "{not json"}
    with pytest.raises(InvalidIngestCommit, match="not readable"):
        checkpoint_from_summaries("c", [(7, summary)])


def test_bounds_and_keys() -> None:
    with pytest.raises(InvalidIngestCommit, match="larger than"):
        IngestCommit("c", 0, {f"f{i}": "y" * 1000 for i in range(MAX_CHECKPOINT_BYTES // 1000 + 1)}, ("file", "/x"))
    with pytest.raises(InvalidIngestCommit, match="connector name"):
        IngestCommit("bad name", 0, {}, ("file", "/x"))
    commit = IngestCommit("c", 4, {}, ("s3://b", "k"))
    assert commit.idempotency_key("uuid-1") != commit.idempotency_key("uuid-2")
    assert commit.commit_extra()["input_datasets"] == [{"namespace": "s3://b", "name": "k"}]
    assert backfill_name("c", "a*", None) == backfill_name("c", "a*", None) != backfill_name("c", "b*", None)
