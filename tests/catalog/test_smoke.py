from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from catalog import RocksCatalog


def test_append_scan_and_commit_log(tmp_path: Path) -> None:
    cat = RocksCatalog("local", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", pa.schema([("a", pa.int64())]))
    table.append(pa.table({"a": [1, 2, 3]}))
    table.append(pa.table({"a": [4]}))
    assert sorted(cat.load_table("ns.t").scan().to_arrow().column("a").to_pylist()) == [1, 2, 3, 4]
    records = list(cat.log.read(0))
    assert [r.seq for r in records] == [1, 2, 3]
    assert [r.operation for r in records] == ["create", "append", "append"]
    assert records[1].added_rows == 3 and records[2].added_rows == 1
    assert records[2].parent_snapshot_id == records[1].snapshot_id
    assert (tmp_path / "wh" / "ns" / "t" / "metadata").is_dir()
    cat.close()


def test_pyiceberg_overwrite_is_one_overwrite_record(tmp_path: Path) -> None:
    """pyiceberg's overwrite commits a delete and an append snapshot together: one record."""
    cat = RocksCatalog("local", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", pa.schema([("a", pa.int64())]))
    table.append(pa.table({"a": [1, 2, 3]}))
    cat.load_table("ns.t").overwrite(pa.table({"a": [9]}))
    record = cat.log.get(cat.log.head())
    assert record is not None
    assert (record.operation, record.added_rows, record.deleted_rows) == ("overwrite", 1, 3)
    assert record.snapshot_id == cat.load_table("ns.t").metadata.current_snapshot_id
    assert sorted(cat.load_table("ns.t").scan().to_arrow().column("a").to_pylist()) == [9]
    cat.close()
