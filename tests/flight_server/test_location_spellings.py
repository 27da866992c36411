"""Every spelling of a local file the catalog may meet in a table, read by the server: plain
paths (tables written before locations carried the scheme), ``file:///p`` (what icefloe writes
now) and Hadoop's ``file:/p`` (what Spark and Iceberg-Java write into manifests), mixed in one
table: SQL reads, change scans, SQL writes and maintenance all serve them."""

from __future__ import annotations

import json
from pathlib import Path

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
from servers import ServerProcess

from catalog import RocksCatalog

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def _ids(conn: object, sql: str) -> list[int]:
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(sql)
        return sorted(r[0] for r in cur.fetchall())


def test_plain_hadoop_and_uri_spellings_in_one_table(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = RocksCatalog("prep", warehouse=str(warehouse))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", SCHEMA)
        data = warehouse / "ns" / "t" / "data"
        data.mkdir(parents=True, exist_ok=True)
        for i, spelling in enumerate(("{p}", "file:{p}", "file://{p}")):
            path = data / f"given-{i}.parquet"
            pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), path)
            table = cat.load_table("ns.t")
            table.add_files([spelling.format(p=path)])
        files = sorted(t.file.file_path for t in cat.load_table("ns.t").scan().plan_files())
        assert sorted(f.split("/data/")[0].split("/tmp")[0] for f in files) == ["", "file:", "file://"]
        cat.load_table("ns.t").append(pa.table({"id": pa.array([3], pa.int64())}))
        head = cat.log.head()
    finally:
        cat.close()
    proc = ServerProcess(warehouse).start()
    try:
        with fsql.connect(proc.location, autocommit=True) as conn:
            assert _ids(conn, "SELECT id FROM ns.t") == [0, 1, 2, 3]
            assert _ids(conn, "SELECT id FROM ns.t WHERE id >= 1") == [1, 2, 3]
            client = flight.FlightClient(proc.location)
            info = client.get_flight_info(flight.FlightDescriptor.for_command(
                json.dumps({"changes": "ns.t", "after": 0, "until": head}).encode()))
            changed = pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints)
            assert sorted(changed["id"].to_pylist()) == [0, 1, 2, 3]
            client.close()
            with conn.cursor() as cur:
                cur.execute("DELETE FROM ns.t WHERE id = 1")  # rewrites the file:/p data file
            assert _ids(conn, "SELECT id FROM ns.t") == [0, 2, 3]
    finally:
        proc.stop()
    cat = RocksCatalog("maint", warehouse=str(warehouse))
    try:
        from catalog.append import Appender
        from catalog.maintenance import maintain

        maintain(Appender(cat), ("ns", "t"), orphan_grace_s=0)
        assert sorted(cat.load_table("ns.t").scan().to_arrow()["id"].to_pylist()) == [0, 2, 3]
    finally:
        cat.close()
