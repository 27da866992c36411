"""icefloe's own fast append (catalog/fast_append.py) commits what pyiceberg's snapshot producer
would: the same manifests, manifest lists and snapshot summaries, readable by plain pyiceberg
from the files on disk; a commit that loses a race leaves none of its files behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import read_manifest_list

from catalog import RocksCatalog, fast_append
from catalog.append import Appender

SCHEMA = pa.schema([pa.field("day", pa.int32()), pa.field("v", pa.string())])


def _batch(i: int) -> pa.Table:
    return pa.table({"day": pa.array([i, i + 1, None if i % 2 else i], pa.int32()), "v": ["a", None, f"c{i}"]},
                    schema=SCHEMA)


@pytest.fixture
def cat(tmp_path: Path) -> Any:
    catalog = RocksCatalog("fast", warehouse=str(tmp_path / "wh"))
    catalog.create_namespace("ns")
    yield catalog
    catalog.close()


def _partitioned(cat: RocksCatalog, name: str, version: str = "2") -> Any:
    table = cat.create_table(f"ns.{name}", SCHEMA, properties={"format-version": version})
    with table.transaction() as tx, tx.update_spec() as update:
        update.add_identity("day")
    return cat.load_table(f"ns.{name}")


def _on_disk(table: Any) -> list[dict[str, Any]]:
    """Every snapshot as its files on disk say (read_manifest_list bypasses the in-memory lists)."""
    out = []
    for snapshot in table.metadata.snapshots:
        listed = read_manifest_list(table.io.new_input(snapshot.manifest_list))
        manifests = []
        for m in listed:
            entries = [(e.status, e.snapshot_id == m.added_snapshot_id, e.sequence_number, e.file_sequence_number,
                        e.data_file.file_path.removeprefix(table.location()), e.data_file.record_count,
                        e.data_file.partition)
                       for e in m.fetch_manifest_entry(table.io, discard_deleted=False)]
            manifests.append({
                "own": m.added_snapshot_id == snapshot.snapshot_id,
                "sequence": (m.sequence_number, m.min_sequence_number),
                "counts": (m.added_files_count, m.existing_files_count, m.deleted_files_count,
                           m.added_rows_count, m.existing_rows_count, m.deleted_rows_count),
                "spec": m.partition_spec_id, "content": m.content,
                "partitions": m.partitions, "length_right": m.manifest_length == os.path.getsize(
                    m.manifest_path.removeprefix("file://")),
                "entries": entries,
            })
        out.append({"sequence": snapshot.sequence_number, "summary": snapshot.summary,
                    "schema_id": snapshot.schema_id, "manifests": manifests})
    return out


def test_fast_append_commits_what_pyicebergs_producer_commits(cat: RocksCatalog) -> None:
    ours, theirs = _partitioned(cat, "ours"), _partitioned(cat, "theirs")
    for i in range(4):
        # The same rows, written by each table into its own folder (a table may reference
        # only files under its own location): equal files at equal relative paths.
        write_id = uuid.uuid4()
        files = list(_dataframe_to_data_files(ours.metadata, _batch(i), ours.io, write_id))
        their_files = list(_dataframe_to_data_files(theirs.metadata, _batch(i), theirs.io, write_id))
        assert len(files) >= 2  # one per partition: several files per append

        ours = cat.load_table("ns.ours")
        tx = ours.transaction()
        written = fast_append.append(ours, files, {"writer": "test"})
        tx._apply(written.updates, written.requirements)
        tx.commit_transaction()

        tx = cat.load_table("ns.theirs").transaction()
        with tx.update_snapshot(snapshot_properties={"writer": "test"}).fast_append() as producer:
            for data_file in their_files:
                producer.append_data_file(data_file)
        tx.commit_transaction()

    ours, theirs = cat.load_table("ns.ours"), cat.load_table("ns.theirs")
    assert len(ours.metadata.snapshots) == 4
    mine, reference = _on_disk(ours), _on_disk(theirs)
    assert mine == reference
    assert all(m["length_right"] for s in mine for m in s["manifests"])
    assert [len(s["manifests"]) for s in mine] == [1, 2, 3, 4]  # each carries the earlier ones
    assert ours.refs()["main"].snapshot_id == ours.metadata.current_snapshot_id
    assert ours.scan().to_arrow().sort_by("v").equals(theirs.scan().to_arrow().sort_by("v"))


@pytest.mark.parametrize("version", ["1", "2"])
def test_plain_pyiceberg_reads_appends_from_the_files_on_disk(cat: RocksCatalog, version: str) -> None:
    _partitioned(cat, "t", version)
    appender = Appender(cat)
    for i in range(3):
        appender.append_table(("ns", "t"), _batch(i))
    table = cat.load_table("ns.t")
    assert table.metadata.format_version == int(version) and len(table.metadata.snapshots) == 3
    # A fresh interpreter with pyiceberg alone: none of icefloe's caches or patches.
    script = (
        "import json, sys; from pyiceberg.table import StaticTable\n"
        "t = StaticTable.from_metadata(sys.argv[1]); rows = t.scan().to_arrow()\n"
        "print(json.dumps({'rows': sorted(rows.column('v').to_pylist(), key=str),"
        " 'snapshots': len(t.metadata.snapshots), 'total': t.current_snapshot().summary['total-records'],"
        " 'manifests': len(t.current_snapshot().manifests(t.io))}))"
    )
    out = subprocess.run([sys.executable, "-c", script, table.metadata_location], check=True,
                         capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                              if k != "PYTHONPATH"})
    seen = json.loads(out.stdout)
    expected = sorted(sum((_batch(i).column("v").to_pylist() for i in range(3)), []), key=str)
    assert seen == {"rows": expected, "snapshots": 3, "total": "9", "manifests": 3}


def test_a_lost_race_removes_its_files_and_the_retry_lands(cat: RocksCatalog, monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    cat.create_table("ns.t", SCHEMA)
    metadata_dir = Path(cat.load_table("ns.t").metadata.location.removeprefix("file://")) / "metadata"
    appender = Appender(cat)
    load_table = cat.load_table
    loads: list[str] = []

    def stale_load(identifier: Any) -> Any:
        # The append loads the table to write its files, then its commit loads it again: that
        # table is handed out, then another writer commits, so the fast append built on it
        # loses the race and _retry writes a new one.
        table = load_table(identifier)
        loads.append("load")
        if len(loads) == 2:
            load_table(identifier).append(_batch(100))
        return table

    monkeypatch.setattr(cat, "load_table", stale_load)
    before = set(os.listdir(metadata_dir))
    result = appender.append_table(("ns", "t"), _batch(1))
    monkeypatch.undo()
    assert len(loads) == 3 and not result.duplicate  # the retry loaded it once more
    table = cat.load_table("ns.t")
    assert sorted(table.scan().to_arrow().column("v").to_pylist(), key=str) == sorted(
        _batch(100).column("v").to_pylist() + _batch(1).column("v").to_pylist(), key=str)
    referenced = {os.path.basename(s.manifest_list) for s in table.metadata.snapshots}
    referenced |= {os.path.basename(m.manifest_path) for m in table.current_snapshot().manifests(table.io)}
    new_avro = {f for f in set(os.listdir(metadata_dir)) - before if f.endswith(".avro")}
    assert new_avro == referenced  # the losing attempt's manifest and manifest list are gone


def test_an_empty_append_is_refused(cat: RocksCatalog) -> None:
    table = cat.create_table("ns.t", SCHEMA)
    with pytest.raises(ValueError, match="at least one data file"):
        fast_append.append(table, [], {})
