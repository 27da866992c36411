"""Local locations are ``file://`` URIs (whether the warehouse was given as a path or a URI),
and every reader of locations (appends, fsync, maintenance, read-only opens) accepts them as
well as the plain paths of tables written before."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_testlib import SCHEMA, ids, local_path, missing_files, rows
from pyiceberg.catalog.sql import SqlCatalog

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.maintenance import maintain, remove_orphans
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


def test_plain_path_warehouse_hands_out_file_uris(tmp_path: Path) -> None:
    """pyiceberg's catalog behaviour suite (test_create_table_with_default_warehouse_location)
    expects a local table's metadata location to carry the scheme: a warehouse given as a plain
    path gets the same file:// locations as one given as a URI."""
    warehouse = tmp_path / "wh"
    cat = RocksCatalog("test", warehouse=str(warehouse))
    try:
        assert cat.properties["warehouse"] == f"file://{warehouse}"
        cat.create_namespace("ns")
        cat.create_table("ns.t", SCHEMA)
        table = cat.load_table("ns.t")
        assert table.metadata_location.startswith(f"file://{warehouse}")
        assert os.path.exists(table.metadata_location[len("file://"):])
        assert table.location() == f"file://{warehouse}/ns/t"
        # A location given as a plain path is the same folder, handed out the same way.
        given = cat.create_table("ns.given", SCHEMA, location=f"{warehouse}/ns/given-here/")
        assert given.location() == f"file://{warehouse}/ns/given-here"
        cat.create_namespace("placed", {"location": f"{warehouse}/placed-ns"})
        assert cat.create_table("placed.t", SCHEMA).location() == f"file://{warehouse}/placed-ns/t"
        table.append(rows(0, 2))
        record = cat.log.get(cat.log.head())
        assert record is not None and record.metadata_location.startswith(f"file://{warehouse}/ns/t/metadata/")
    finally:
        cat.close()


def _legacy_table(warehouse: Path, sql_db: Path) -> str:
    """A table as icefloe wrote them before locations carried the scheme: plain paths in its
    metadata, manifests and pointer (written here by pyiceberg's SqlCatalog over a plain path,
    inside the warehouse). Returns its metadata location, to register as its pointer."""
    sql = SqlCatalog("legacy", uri=f"sqlite:///{sql_db}", warehouse=str(warehouse))
    try:
        sql.create_namespace("ns")
        old = sql.create_table("ns.old", SCHEMA, location=f"{warehouse}/ns/old",
                               properties={"history.expire.max-snapshot-age-ms": "0"})
        old.append(rows(0, 3))
        old.append(rows(3, 3))
        assert old.metadata_location.startswith(f"{warehouse}/ns/old/metadata/")
        return str(old.metadata_location)
    finally:
        sql.close()


def test_tables_with_plain_path_pointers_keep_working(tmp_path: Path) -> None:
    """An existing warehouse whose pointers and files use plain paths: its tables load, read,
    take appends (new files under the file:// spelling), survive orphan removal and full
    maintenance with both spellings referenced, next to new tables and across a reopen."""
    warehouse = tmp_path / "wh"
    cat = RocksCatalog("test", warehouse=str(warehouse))
    try:
        cat.create_namespace("ns")
        plain = _legacy_table(warehouse, tmp_path / "sql.db")
        cat.register_table("ns.old", plain)
        old = cat.load_table("ns.old")
        assert old.metadata_location == plain  # the pointer as stored
        assert old.location() == f"file://{warehouse}/ns/old"  # handed out with the scheme
        assert ids(old) == list(range(6))
        old.append(rows(6, 2))
        Appender(cat).append_table(("ns", "old"), rows(8, 2))
        new = cat.create_table("ns.new", SCHEMA)
        new.append(rows(100, 1))
        old = cat.load_table("ns.old")
        assert old.metadata_location.startswith(f"file://{warehouse}/ns/old/metadata/")
        files = [t.file.file_path for t in old.scan().plan_files()]
        assert any(f.startswith("/") for f in files) and any(f.startswith("file://") for f in files)
        assert ids(old) == list(range(10)) and missing_files(old) == []
        orphan = warehouse / "ns" / "old" / "data" / "left-by-a-crash.parquet"
        orphan.write_bytes(b"x")
        # Referenced files in either spelling are kept; only the orphan goes.
        assert remove_orphans(Appender(cat), ("ns", "old"), grace_s=0) == 1
        assert not orphan.exists() and missing_files(cat.load_table("ns.old")) == []
        report = maintain(Appender(cat), ("ns", "old"), orphan_grace_s=0)
        assert report.rows == 10
        old = cat.load_table("ns.old")
        assert ids(old) == list(range(10)) and missing_files(old) == []
        live = sorted(local_path(t.file.file_path) for t in old.scan().plan_files())
        on_disk = sorted(str(p) for p in (warehouse / "ns" / "old" / "data").glob("*.parquet"))
        assert on_disk == live
    finally:
        cat.close()
    again = RocksCatalog("again", warehouse=f"file://{warehouse}")
    try:
        assert ids(again.load_table("ns.old")) == list(range(10))
        assert ids(again.load_table("ns.new")) == [100]
    finally:
        again.close()


def test_an_untouched_plain_path_table_reads_after_reopen(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = RocksCatalog("test", warehouse=str(warehouse))
    cat.create_namespace("ns")
    plain = _legacy_table(warehouse, tmp_path / "sql.db")
    cat.register_table("ns.old", plain)
    cat.close()
    reader = RocksCatalog("reader", warehouse=str(warehouse), **{"read-only": "true"})
    try:
        table = reader.load_table("ns.old")
        assert table.metadata_location == plain and ids(table) == list(range(6))
        assert missing_files(table) == []
    finally:
        reader.close()


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
