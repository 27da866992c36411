"""Bounded metadata: snapshot expiry on commit and removal of old metadata files (RocksCatalog only)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from catalog_testlib import SCHEMA, ids, local_path, missing_files, rows

from catalog import RocksCatalog


def test_snapshots_expire_on_commit(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    table = rocks.create_table("ns.t", SCHEMA, properties={"icefloe.snapshots.retain": "5"})
    for i in range(12):
        table.append(rows(i * 10, 10))
    loaded = rocks.load_table("ns.t")
    assert len(loaded.metadata.snapshots) == 5
    assert len(loaded.metadata.snapshot_log) == 5
    appends = [r for r in rocks.log.read(0) if r.operation == "append"]
    assert [s.snapshot_id for s in loaded.metadata.snapshots] == [r.snapshot_id for r in appends[-5:]]
    current = loaded.current_snapshot()
    assert current is not None and current.snapshot_id == appends[-1].snapshot_id
    # Append-only: the current snapshot still reaches every row, and nothing is missing.
    assert ids(loaded) == list(range(120))
    assert missing_files(loaded) == []


def test_snapshots_with_refs_are_kept(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    table = rocks.create_table("ns.t", SCHEMA, properties={"icefloe.snapshots.retain": "3"})
    table.append(rows(0, 1))
    tagged = table.current_snapshot()
    assert tagged is not None
    table.manage_snapshots().create_tag(tagged.snapshot_id, "v1").commit()
    for i in range(1, 8):
        table.append(rows(i, 1))
    loaded = rocks.load_table("ns.t")
    kept = [s.snapshot_id for s in loaded.metadata.snapshots]
    assert tagged.snapshot_id in kept and len(kept) == 3
    assert loaded.scan(snapshot_id=tagged.snapshot_id).to_arrow().num_rows == 1
    assert ids(loaded) == list(range(8))


def test_expiry_off_and_default(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    off = rocks.create_table("ns.off", SCHEMA, properties={"icefloe.snapshots.retain": "0"})
    default = rocks.create_table("ns.default", SCHEMA)
    for i in range(6):
        off.append(rows(i, 1))
        default.append(rows(i, 1))
    assert len(rocks.load_table("ns.off").metadata.snapshots) == 6
    assert len(rocks.load_table("ns.default").metadata.snapshots) == 6  # default keeps 100


def test_old_metadata_files_are_removed(rocks: RocksCatalog, caplog: pytest.LogCaptureFixture) -> None:
    """Removed once, by the catalog (pyiceberg's Table would try again and log a warning)."""
    rocks.create_namespace("ns")
    table = rocks.create_table("ns.t", SCHEMA, properties={"write.metadata.previous-versions-max": "3"})
    for i in range(10):
        table.append(rows(i, 1))
    loaded = rocks.load_table("ns.t")
    folder = Path(local_path(loaded.metadata_location)).parent
    on_disk = sorted(p.name for p in folder.glob("*.metadata.json"))
    expected = sorted(Path(local_path(e.metadata_file)).name for e in loaded.metadata.metadata_log)
    assert len(expected) == 3
    assert on_disk == sorted([*expected, Path(local_path(loaded.metadata_location)).name])
    assert ids(loaded) == list(range(10))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_old_metadata_files_stay_when_asked(rocks: RocksCatalog) -> None:
    """``write.metadata.delete-after-commit.enabled=false``: every metadata file stays."""
    rocks.create_namespace("ns")
    table = rocks.create_table("ns.t", SCHEMA, properties={"write.metadata.previous-versions-max": "2",
                                                           "write.metadata.delete-after-commit.enabled": "false"})
    for i in range(5):
        table.append(rows(i, 1))
    loaded = rocks.load_table("ns.t")
    folder = Path(local_path(loaded.metadata_location)).parent
    assert len(list(folder.glob("*.metadata.json"))) == 6 and len(loaded.metadata.metadata_log) == 2
    assert ids(loaded) == list(range(5))
