"""A warehouse given as a ``file://`` URI: locations keep that form, and every reader of
locations (appends, fsync, maintenance, read-only opens) accepts it as well as plain paths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_testlib import SCHEMA, ids, local_path, missing_files, rows

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.maintenance import maintain
from catalog.maintenance_worker import IN_PROCESS, MaintenanceWorker


@pytest.fixture
def uri_catalog(tmp_path: Path) -> Iterator[RocksCatalog]:
    cat = RocksCatalog("test", warehouse=f"file://{tmp_path}/wh")
    cat.create_namespace("ns")
    try:
        yield cat
    finally:
        cat.close()


def _data_files_on_disk(root: Path) -> list[str]:
    return sorted(str(p) for p in (root / "ns" / "t" / "data").glob("*.parquet"))


def test_locations_keep_the_file_uri(uri_catalog: RocksCatalog, tmp_path: Path) -> None:
    warehouse = f"file://{tmp_path}/wh"
    assert uri_catalog.properties["warehouse"] == warehouse
    table = uri_catalog.create_table("ns.t", SCHEMA)
    assert table.location() == f"{warehouse}/ns/t"
    assert table.metadata_location.startswith(f"{warehouse}/ns/t/metadata/")
    table.append(rows(0, 3))
    loaded = uri_catalog.load_table("ns.t")
    assert loaded.metadata_location.startswith(f"{warehouse}/ns/t/metadata/")
    assert all(t.file.file_path.startswith(f"{warehouse}/ns/t/data/") for t in loaded.scan().plan_files())
    assert missing_files(loaded) == []
    assert ids(loaded) == [0, 1, 2]
    # The commit log records the location as the catalog wrote it.
    record = uri_catalog.log.get(uri_catalog.log.head())
    assert record is not None and record.metadata_location == loaded.metadata_location


def test_plain_path_warehouse_keeps_plain_locations(tmp_path: Path) -> None:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", SCHEMA)
        assert table.location() == f"{tmp_path}/wh/ns/t"
        assert table.metadata_location.startswith(f"{tmp_path}/wh/ns/t/metadata/")
    finally:
        cat.close()


def test_relative_file_uri_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cat = RocksCatalog("test", warehouse="file:wh")
    try:
        assert cat.properties["warehouse"] == f"file://{tmp_path}/wh"
    finally:
        cat.close()


@pytest.mark.parametrize("worker_kind", ["in-process", "worker-process"])
def test_appends_and_full_maintenance(uri_catalog: RocksCatalog, tmp_path: Path, worker_kind: str) -> None:
    """Streaming appends (fsync'd through their local paths), compaction, expiry and orphan
    removal on file:// locations: rows unchanged, only live files left on disk."""
    uri_catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))
    uri_catalog.load_table("ns.t").transaction().set_properties(
        {"history.expire.max-snapshot-age-ms": "0"}
    ).commit_transaction()
    appender = Appender(uri_catalog)
    for i in range(10):
        appender.append_table(("ns", "t"), pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
    orphan = tmp_path / "wh" / "ns" / "t" / "data" / "left-by-a-crash.parquet"
    orphan.write_bytes(b"x")
    worker = IN_PROCESS if worker_kind == "in-process" else MaintenanceWorker()
    try:
        report = maintain(appender, ("ns", "t"), orphan_grace_s=0, worker=worker)
    finally:
        if worker is not IN_PROCESS:
            worker.close()
    assert report.compacted_files == 10 and report.rows == 100
    assert report.expired_snapshots >= 10 and report.removed_orphans >= 11
    table = uri_catalog.load_table("ns.t")
    live = sorted(local_path(t.file.file_path) for t in table.scan().plan_files())
    assert _data_files_on_disk(tmp_path / "wh") == live
    assert not orphan.exists()
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(100))
    assert missing_files(table) == []


def test_streamed_create_and_read_only_open(uri_catalog: RocksCatalog, tmp_path: Path) -> None:
    appender = Appender(uri_catalog)
    data = rows(0, 5)
    result = appender.create_from_stream(("ns", "made"), data.schema, iter(data.to_batches()))
    assert result.rows == 5
    made = uri_catalog.load_table("ns.made")
    assert made.location() == f"file://{tmp_path}/wh/ns/made"
    reader = RocksCatalog("reader", warehouse=str(tmp_path / "wh"), **{"read-only": "true"})
    try:
        # A plain-path open of the same warehouse reads the file:// locations written before.
        assert ids(reader.load_table("ns.made")) == [0, 1, 2, 3, 4]
    finally:
        reader.close()
