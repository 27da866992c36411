"""The warehouse is a sandbox: no entry point reads, writes or deletes a file outside a table's
own folder, or touches what the server keeps for itself.

One real server (Flight + ``--rest-port``) per module in a scratch folder that also holds what
must never be touched: a canary folder outside the warehouse (a text file and a Parquet file
with rows of its own), another table (``ns.victim``), the catalog folder and the token key.
After every case the canaries' bytes, the victim's files and rows, the key file and the
catalog's files are unchanged and the server answers. Each path trick (absolute, ``..``, URL
escapes, a symlink, another table's folder, the warehouse root, the catalog folder, a
registered file) is tried on each entry point that takes a location.

Tables that landed before the sandbox existed (a folder at the warehouse root, manifests that
name files elsewhere) are made by writing the catalog directly while the server is stopped;
the server must refuse to read, rewrite or delete outside for them too, and survive ``kill -9``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from adbc_driver_flightsql import dbapi as flightsql

from tests.flight_server.web.rest_support import rest_url
from tests.servers import ServerProcess

SCHEMA_JSON = {"type": "struct", "schema-id": 0,
               "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
CANARY_ROWS = 7


@dataclass
class Site:
    root: Path
    warehouse: Path
    outside: Path
    server: ServerProcess
    rest: httpx.Client

    def sql(self, query: str) -> pa.Table:
        with flightsql.connect(self.server.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(query)
            return cur.fetch_arrow_table()

    def flight(self) -> flight.FlightClient:
        return flight.FlightClient(self.server.location)


def _digest(folder: Path, skip: str = "catalog.rocksdb") -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and skip not in p.parts}


def _start(root: Path) -> ServerProcess:
    return ServerProcess(root / "warehouse", ["--rest-port", "0"], cwd=root).start()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("sandbox")
    outside = root / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("do not touch")
    pq.write_table(pa.table({"id": pa.array(range(1000, 1000 + CANARY_ROWS), pa.int64())}),
                   outside / "canary.parquet")
    server = _start(root)
    rest = httpx.Client(base_url=rest_url(server), timeout=30)
    s = Site(root, root / "warehouse", outside, server, rest)
    s.sql("CREATE SCHEMA ns")
    s.sql("CREATE TABLE ns.victim (id BIGINT)")
    s.sql("INSERT INTO ns.victim VALUES (1), (2), (3)")
    s.sql("CREATE TABLE ns.t (id BIGINT)")
    s.sql("INSERT INTO ns.t VALUES (10)")
    try:
        yield s
    finally:
        rest.close()
        s.server.stop()


@dataclass
class Guarded:
    outside: dict[str, str]
    victim: dict[str, str]
    key: bytes
    catalog_files: set[str]


def _guarded(site: Site) -> Guarded:
    catalog = site.warehouse / "catalog.rocksdb"
    return Guarded(_digest(site.outside), _digest(site.warehouse / "ns" / "victim"),
                   (site.warehouse / ".icefloe-token.key").read_bytes(),
                   {p.name for p in catalog.iterdir() if p.name in ("CURRENT", "IDENTITY")})


@pytest.fixture
def untouched(site: Site) -> Iterator[None]:
    before = _guarded(site)
    yield
    assert site.server.proc is not None and site.server.proc.poll() is None, site.server.log[-2000:]
    after = _guarded(site)
    assert after.outside == before.outside
    assert after.victim == before.victim
    assert after.key == before.key
    assert after.catalog_files == before.catalog_files
    assert site.sql("SELECT count(*) AS n FROM ns.victim").column("n").to_pylist() == [3]


def _expect(answer: httpx.Response, status: int, fragment: str = "") -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert str(body["error"]["code"]) == str(status)
    assert fragment.lower() in body["error"]["message"].lower(), body
    return body


def _tricks(site: Site) -> dict[str, str]:
    wh = site.warehouse
    link = wh / "ns" / "escape"
    if not link.is_symlink():
        link.symlink_to(site.outside, target_is_directory=True)
    return {
        "absolute": str(site.outside / "t"),
        "dotdot": f"{wh}/ns/../../outside/t",
        "escaped-dotdot": f"file://{wh}/ns/%2e%2e/%2e%2e/outside/t",
        "symlink": f"{wh}/ns/escape/t",
        "warehouse-root": str(wh),
        "warehouse-root-uri": f"file://{wh}/",
        "other-table": f"{wh}/ns/victim",
        "inside-other-table": f"{wh}/ns/victim/data/mine",
        "catalog-folder": f"{wh}/catalog.rocksdb/t",
        "key-file": f"{wh}/.icefloe-token.key",
        "object-store": "s3://bucket/t",
    }


TRICKS = ["absolute", "dotdot", "escaped-dotdot", "symlink", "warehouse-root", "warehouse-root-uri", "other-table",
          "inside-other-table", "catalog-folder", "key-file", "object-store"]


# -- table and namespace locations -------------------------------------------------------------


@pytest.mark.parametrize("trick", TRICKS)
@pytest.mark.parametrize("stage", [False, True])
def test_create_table_location(site: Site, untouched: None, trick: str, stage: bool) -> None:
    location = _tricks(site)[trick]
    body = {"name": f"c_{uuid.uuid4().hex[:8]}", "schema": SCHEMA_JSON, "location": location, "stage-create": stage}
    _expect(site.rest.post("/v1/namespaces/ns/tables", json=body), 400)


@pytest.mark.parametrize("trick", ["absolute", "dotdot", "escaped-dotdot", "symlink", "other-table",
                                   "catalog-folder", "object-store"])
@pytest.mark.parametrize("prop", ["write.data.path", "write.metadata.path", "write.object-storage.path"])
def test_create_table_location_properties(site: Site, untouched: None, trick: str, prop: str) -> None:
    location = _tricks(site)[trick]
    body = {"name": f"p_{uuid.uuid4().hex[:8]}", "schema": SCHEMA_JSON, "properties": {prop: location}}
    _expect(site.rest.post("/v1/namespaces/ns/tables", json=body), 400, prop)


def test_a_table_property_cannot_pick_the_file_io(site: Site, untouched: None) -> None:
    body = {"name": "io", "schema": SCHEMA_JSON, "properties": {"py-io-impl": "os.system"}}
    _expect(site.rest.post("/v1/namespaces/ns/tables", json=body), 400, "py-io-impl")


@pytest.mark.parametrize("trick", ["absolute", "dotdot", "symlink", "other-table", "catalog-folder"])
def test_set_properties_and_set_location(site: Site, untouched: None, trick: str) -> None:
    location = _tricks(site)[trick]
    for update in ({"action": "set-properties", "updates": {"write.data.path": location}},
                   {"action": "set-properties", "updates": {"write.metadata.path": location}},
                   {"action": "set-location", "location": location}):
        _expect(site.rest.post("/v1/namespaces/ns/tables/t", json={"requirements": [], "updates": [update]}), 400)
    # Nothing landed: the table still writes where it did.
    assert site.sql("SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [1]


@pytest.mark.parametrize("trick", ["absolute", "dotdot", "escaped-dotdot", "symlink", "catalog-folder"])
def test_namespace_location(site: Site, untouched: None, trick: str) -> None:
    location = _tricks(site)[trick]
    _expect(site.rest.post("/v1/namespaces", json={"namespace": [f"n{uuid.uuid4().hex[:6]}"],
                                                   "properties": {"location": location}}), 400, "location")
    answer = site.rest.post("/v1/namespaces/ns/properties", json={"updates": {"location": location}})
    _expect(answer, 400, "location")


def test_sql_set_properties_with_an_outside_path(site: Site, untouched: None) -> None:
    with pytest.raises(Exception) as info:
        site.sql(f"ALTER TABLE ns.t SET ('write.data.path' = '{site.outside}')")
    assert "write.data.path" in str(info.value) and "outside" in str(info.value)
    site.sql("INSERT INTO ns.t VALUES (11)")
    site.sql("DELETE FROM ns.t WHERE id = 11")
    assert sorted(p.name for p in site.outside.iterdir()) == ["canary.parquet", "canary.txt"]


# -- register ----------------------------------------------------------------------------------


def _victim_metadata(site: Site) -> Path:
    files = sorted((site.warehouse / "ns" / "victim" / "metadata").glob("*.metadata.json"))
    return files[-1]


def _register(site: Site, name: str, metadata: Path | str) -> httpx.Response:
    return site.rest.post("/v1/namespaces/ns/register", json={"name": name, "metadata-location": str(metadata)})


def test_register_a_file_outside_the_warehouse(site: Site, untouched: None) -> None:
    copy = site.outside / "copy.metadata.json"
    shutil.copy(_victim_metadata(site), copy)
    try:
        _expect(_register(site, "r1", copy), 400, "warehouse")
        _expect(_register(site, "r1", f"{site.warehouse}/ns/escape/copy.metadata.json"), 400, "warehouse")
        _expect(_register(site, "r1", f"{site.warehouse}/catalog.rocksdb/CURRENT"), 400)
    finally:
        copy.unlink()


def _crafted(site: Site, folder: str, edit: Any) -> Path:
    """A copy of the victim's metadata, edited, placed in a folder of the warehouse."""
    meta = json.loads(_victim_metadata(site).read_text())
    edit(meta)
    target = site.warehouse / "ns" / folder / "metadata"
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"00000-{uuid.uuid4()}.metadata.json"
    path.write_text(json.dumps(meta))
    return path


def test_register_a_copy_that_claims_another_tables_folder(site: Site, untouched: None) -> None:
    path = _crafted(site, "copy1", lambda m: None)  # its location is still the victim's folder
    _expect(_register(site, "copy1", path), 400, "victim")


def test_register_a_copy_whose_files_are_another_tables(site: Site, untouched: None) -> None:
    def move(meta: dict[str, Any]) -> None:
        meta["location"] = f"{site.warehouse}/ns/copy2"
    path = _crafted(site, "copy2", move)  # its manifest lists are still the victim's
    _expect(_register(site, "copy2", path), 400, "outside the table's folder")


def test_register_a_copy_whose_metadata_log_names_a_victim(site: Site, untouched: None) -> None:
    def move(meta: dict[str, Any]) -> None:
        meta["location"] = f"{site.warehouse}/ns/copy3"
        meta["snapshots"], meta["current-snapshot-id"], meta["refs"] = [], -1, {}
        meta["snapshot-log"] = []
        meta["metadata-log"] = [{"timestamp-ms": 1, "metadata-file": str(site.outside / "canary.txt")}]
    path = _crafted(site, "copy3", move)
    _expect(_register(site, "copy3", path), 400, "metadata log")


# -- commits that name files outside -----------------------------------------------------------


def _hand_made_snapshot(site: Site, table: str, data_file: str) -> dict[str, Any]:
    """An add-snapshot a REST client with storage access could send: a manifest list and a
    manifest it wrote inside the table's folder, naming ``data_file``."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.typedef import Record

    catalog = RestCatalog("c", uri=rest_url(site.server))
    tbl = catalog.load_table(f"ns.{table}")
    snapshot_id = int(uuid.uuid4().int % (2**62))
    folder = Path(tbl.location().removeprefix("file://")) / "metadata"
    manifest_path = str(folder / f"hand-{snapshot_id}-m0.avro")
    list_path = str(folder / f"snap-{snapshot_id}-hand.avro")
    data = DataFile.from_args(content=DataFileContent.DATA, file_path=data_file, file_format=FileFormat.PARQUET,
                              partition=Record(), record_count=CANARY_ROWS, file_size_in_bytes=os.path.getsize(
                                  site.outside / "canary.parquet"))
    data.spec_id = 0
    with write_manifest(format_version=2, spec=tbl.spec(), schema=tbl.schema(), output_file=tbl.io.new_output(
            manifest_path), snapshot_id=snapshot_id, avro_compression="null") as writer:
        writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                           data_file=data))
    manifest = writer.to_manifest_file()
    parent = tbl.metadata.current_snapshot_id
    seq = tbl.metadata.next_sequence_number()
    with write_manifest_list(format_version=2, output_file=tbl.io.new_output(list_path), snapshot_id=snapshot_id,
                             parent_snapshot_id=parent, sequence_number=seq, avro_compression="null") as lw:
        lw.add_manifests([manifest])
    return {"snapshot-id": snapshot_id, "parent-snapshot-id": parent, "timestamp-ms": 1_700_000_000_000,
            "manifest-list": list_path, "summary": {"operation": "append"}, "sequence-number": seq,
            "schema-id": tbl.schema().schema_id}


@pytest.mark.parametrize("where", ["outside", "victim", "escaped"])
def test_hand_made_append_naming_a_file_outside_is_refused(site: Site, untouched: None, where: str) -> None:
    victim_file = next((site.warehouse / "ns" / "victim" / "data").rglob("*.parquet"))
    data_file = {"outside": str(site.outside / "canary.parquet"), "victim": str(victim_file),
                 "escaped": f"file://{site.warehouse}/ns/t/%2e%2e/%2e%2e/../outside/canary.parquet"}[where]
    snapshot = _hand_made_snapshot(site, "t", data_file)
    body = {"requirements": [], "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                                            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                                             "snapshot-id": snapshot["snapshot-id"]}]}
    _expect(site.rest.post("/v1/namespaces/ns/tables/t", json=body), 400, "data file")
    assert site.sql("SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [1]


def test_statistics_file_outside_is_refused(site: Site, untouched: None) -> None:
    tbl = site.rest.get("/v1/namespaces/ns/tables/t").json()["metadata"]
    stats = {"snapshot-id": tbl["current-snapshot-id"], "statistics-path": str(site.outside / "canary.txt"),
             "file-size-in-bytes": 12, "file-footer-size-in-bytes": 4, "blob-metadata": []}
    body = {"requirements": [], "updates": [{"action": "set-statistics", "snapshot-id": tbl["current-snapshot-id"],
                                             "statistics": stats}]}
    _expect(site.rest.post("/v1/namespaces/ns/tables/t", json=body), 400, "statistics")


# -- writes through a symlink ------------------------------------------------------------------


def test_appends_do_not_follow_a_symlink_out(site: Site, untouched: None) -> None:
    site.sql("CREATE TABLE ns.linked (id BIGINT)")
    data = site.warehouse / "ns" / "linked" / "data"
    if data.exists():
        shutil.rmtree(data)
    target = site.outside / "linked-data"
    target.mkdir()
    data.symlink_to(target, target_is_directory=True)
    try:
        with pytest.raises(Exception) as info:
            site.sql("INSERT INTO ns.linked VALUES (1)")
        assert "outside" in str(info.value), site.server.log[-3000:]
        client = site.flight()
        descriptor = flight.FlightDescriptor.for_path("ns", "linked")
        with pytest.raises(flight.FlightUnauthorizedError):
            writer, reader = client.do_put(descriptor, pa.schema([("id", pa.int64())]))
            writer.write_table(pa.table({"id": pa.array([1], pa.int64())}))
            writer.done_writing()
            reader.read()
            writer.close()
        client.close()
        assert list(target.iterdir()) == []
        assert site.sql("SELECT count(*) AS n FROM ns.linked").column("n").to_pylist() == [0]
    finally:
        data.unlink()
        shutil.rmtree(target)


# -- tables that landed before the sandbox ----------------------------------------------------


def _land_legacy(warehouse: Path, outside: Path) -> None:
    """Write, with the server stopped, tables as an older icefloe let them land."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, update_table_metadata
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType, NestedField

    from catalog import RocksCatalog
    from catalog.durable_io import DurableFileIO
    from catalog.metadata_json import write_metadata
    from catalog.sandbox import OutsideTableError

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    io = DurableFileIO({})
    catalog = RocksCatalog("legacy", warehouse=str(warehouse))
    try:
        def land(name: str, location: str, data_files: list[str]) -> None:
            meta = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, location, {})
            if data_files:
                snapshot_id = 4242 + len(name)
                mpath = f"{warehouse}/ns/legacy_{name}_m.avro"
                lpath = f"{warehouse}/ns/legacy_{name}_l.avro"
                with write_manifest(format_version=2, spec=UNPARTITIONED_PARTITION_SPEC, schema=schema,
                                    output_file=io.new_output(mpath), snapshot_id=snapshot_id,
                                    avro_compression="null") as writer:
                    for path in data_files:
                        data = DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                                                  file_format=FileFormat.PARQUET, partition=Record(),
                                                  record_count=CANARY_ROWS, file_size_in_bytes=os.path.getsize(path))
                        data.spec_id = 0
                        writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                           snapshot_id=snapshot_id, data_file=data))
                with write_manifest_list(format_version=2, output_file=io.new_output(lpath), snapshot_id=snapshot_id,
                                         parent_snapshot_id=None, sequence_number=1,
                                         avro_compression="null") as lw:
                    lw.add_manifests([writer.to_manifest_file()])
                snap = Snapshot(snapshot_id=snapshot_id, sequence_number=1, timestamp_ms=1_700_000_000_000,
                                manifest_list=lpath, summary=Summary(Operation.APPEND), schema_id=0)
                meta = update_table_metadata(meta, (AddSnapshotUpdate(snapshot=snap), SetSnapshotRefUpdate(
                    ref_name="main", type="branch", snapshot_id=snapshot_id)))
            mloc = f"{warehouse}/ns/legacy_{name}.metadata.json"
            write_metadata(meta, io, mloc)
            try:
                catalog._register_pointer(("ns",), f"legacy_{name}", mloc, meta, "register", overwrite=False)
            except OutsideTableError:
                pass  # landed; only the Table handle it returns is refused

        land("root", str(warehouse), [])
        land("reader", f"{warehouse}/ns/legacy_reader", [str(outside / "canary.parquet")])
        victim_files = [str(p) for p in (warehouse / "ns" / "victim" / "data").rglob("*.parquet")]
        land("thief", f"{warehouse}/ns/legacy_thief", victim_files)
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def legacy(site: Site) -> Site:
    site.rest.close()
    site.server.stop()
    _land_legacy(site.warehouse, site.outside)
    site.server = _start(site.root)
    site.rest = httpx.Client(base_url=rest_url(site.server), timeout=30)
    return site


def test_legacy_table_reading_outside_is_refused(legacy: Site, untouched: None) -> None:
    with pytest.raises(Exception) as info:
        legacy.sql("SELECT * FROM ns.legacy_reader")
    assert "outside" in str(info.value)
    client = legacy.flight()
    command = json.dumps({"changes": "ns.legacy_reader", "after": 0, "until": _head(legacy), "include": "all"})
    seen: list[int] = []
    try:
        found = client.get_flight_info(flight.FlightDescriptor.for_command(command.encode()))
        for endpoint in found.endpoints:
            table = client.do_get(endpoint.ticket).read_all()
            seen += table.column("id").to_pylist() if "id" in table.column_names else []
    except flight.FlightUnauthorizedError:
        pass
    client.close()
    assert not set(seen) & set(range(1000, 1000 + CANARY_ROWS))


def _head(site: Site) -> int:
    return int(legacy_head(site))


def legacy_head(site: Site) -> int:
    from catalog import RocksCatalog

    reader = RocksCatalog("reader", warehouse=str(site.warehouse), **{"read-only": "true"})
    try:
        return int(reader.log.head())
    finally:
        reader.close()


def _maintain(site: Site, table: str) -> Any:
    body = json.dumps({"table": table, "orphan_grace_s": 0}).encode()
    client = site.flight()
    try:
        return list(client.do_action(flight.Action("icefloe.maintain", body)))
    finally:
        client.close()


def test_maintenance_of_a_table_at_the_warehouse_root_deletes_nothing(legacy: Site, untouched: None) -> None:
    stray = legacy.warehouse / "stray-file.bin"
    stray.write_bytes(b"x")
    os.utime(stray, (1, 1))
    with pytest.raises(flight.FlightError):
        _maintain(legacy, "ns.legacy_root")
    assert stray.exists()
    stray.unlink()


def test_maintenance_and_purge_never_touch_another_tables_files(legacy: Site, untouched: None) -> None:
    for table in ("ns.legacy_thief", "ns.victim"):
        try:
            _maintain(legacy, table)
        except flight.FlightError:
            pass
    answer = legacy.rest.delete("/v1/namespaces/ns/tables/legacy_thief", params={"purgeRequested": "true"})
    assert answer.status_code in (204, 400, 403), answer.text


def test_the_catalog_survives_kill_and_restart_after_hostile_maintenance(legacy: Site) -> None:
    before = _guarded(legacy)
    try:
        _maintain(legacy, "ns.legacy_root")
    except flight.FlightError:
        pass
    legacy.rest.close()
    legacy.server.kill()
    legacy.server = _start(legacy.root)
    legacy.rest = httpx.Client(base_url=rest_url(legacy.server), timeout=30)
    after = _guarded(legacy)
    assert after.key == before.key and after.outside == before.outside and after.victim == before.victim
    assert legacy.sql("SELECT count(*) AS n FROM ns.victim").column("n").to_pylist() == [3]
    assert legacy.sql("SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [1]
