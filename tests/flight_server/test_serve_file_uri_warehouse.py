"""``icefloe serve --warehouse file:///...``: tables get file:// locations, and every server
path that reads locations (DoPut, native and dataset scans, SQL writes, metadata tables,
time travel, maintenance) works on them; nothing leaks the server's paths."""

from __future__ import annotations

import json
from pathlib import Path

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from servers import ServerProcess

from catalog import RocksCatalog


def _query(conn: fsql.Connection, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def test_server_over_a_file_uri_warehouse(tmp_path: Path) -> None:
    root = tmp_path / "warehouse"
    uri = f"file://{root}"
    proc = ServerProcess(root, ["--warehouse", uri]).start()  # the last --warehouse wins
    try:
        with fsql.connect(proc.location, autocommit=True) as conn:
            with conn.cursor() as cur:
                cur.execute("CREATE SCHEMA ns")
                cur.execute("CREATE TABLE ns.t (id BIGINT, v VARCHAR)")
            for i in range(4):
                data = pa.table({"id": pa.array(range(i * 5, i * 5 + 5), pa.int64()),
                                 "v": [f"r{j}" for j in range(i * 5, i * 5 + 5)]})
                snapshot = do_put(proc.location, ("ns", "t"), data)["snapshot_id"]  # the last one: 20 rows
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [20]
            plain = _query(conn, "SELECT * FROM ns.t")  # the plain / native Parquet scan
            assert sorted(plain.column("id").to_pylist()) == list(range(20))
            selective = _query(conn, "SELECT id FROM ns.t WHERE id >= 17")  # native scan with a filter
            assert sorted(selective.column("id").to_pylist()) == [17, 18, 19]
            files = _query(conn, 'SELECT path FROM ns."t$files"').column("path").to_pylist()
            assert len(files) == 4
            with conn.cursor() as cur:
                cur.execute("DELETE FROM ns.t WHERE id < 3")
                cur.execute("UPDATE ns.t SET v = 'x' WHERE id = 19")
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [17]
            assert _query(conn, "SELECT v FROM ns.t WHERE id = 19").column("v").to_pylist() == ["x"]
            old = _query(conn, f"SELECT count(*) AS n FROM ns.t AT (VERSION => {snapshot})")
            assert old.column("n").to_pylist() == [20]
            with pytest.raises(Exception) as missing:
                _query(conn, "SELECT * FROM ns.nope")
            assert str(root) not in str(missing.value)
        client = flight.FlightClient(proc.location)
        try:
            action = flight.Action("icefloe.maintain", json.dumps({"table": "ns.t", "orphan_grace_s": 0}).encode())
            reports = [json.loads(r.body.to_pybytes()) for r in client.do_action(action)]
        finally:
            client.close()
        assert reports and reports[0]["table"] == "ns.t"
        with fsql.connect(proc.location, autocommit=True) as conn:
            assert sorted(_query(conn, "SELECT id FROM ns.t").column("id").to_pylist()) == list(range(3, 20))
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log, proc.log
    cat = RocksCatalog("check", warehouse=uri)
    try:
        table = cat.load_table("ns.t")
        assert table.location() == f"{uri}/ns/t"
        assert table.metadata_location.startswith(f"{uri}/ns/t/metadata/")
        assert all(t.file.file_path.startswith(f"{uri}/ns/t/data/") for t in table.scan().plan_files())
    finally:
        cat.close()
