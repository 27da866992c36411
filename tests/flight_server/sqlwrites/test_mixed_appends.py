"""SQL writes mixed with plain Flight DoPut appends and ADBC ingest on the same table."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from doput_client import do_put
from servers import ServerProcess
from sqlwrites_lib import log_head, log_records, rows, scalar, sql, update


def test_sql_and_doput_on_one_table(conn: Any, write_server: ServerProcess, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA mix")
    update(conn, "CREATE TABLE mix.t (id BIGINT NOT NULL, v VARCHAR)")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    put = do_put(write_server.location, ("mix", "t"), pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema))
    assert put["rows"] == 3 and put["table"] == "mix.t"
    assert update(conn, "INSERT INTO mix.t VALUES (4, 'd')") == 1
    assert update(conn, "DELETE FROM mix.t WHERE id = 2") == 1
    do_put(write_server.location, ("mix", "t"), pa.table({"id": [5], "v": ["e"]}, schema))
    assert update(conn, "UPDATE mix.t SET v = v || '!' WHERE id IN (1, 5)") == 2
    expected = [{"id": 1, "v": "a!"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}, {"id": 5, "v": "e!"}]
    assert rows(conn, "SELECT * FROM mix.t ORDER BY id") == expected
    scanned = reader_catalog.load_table("mix.t").scan().to_arrow().to_pylist()
    assert sorted(scanned, key=lambda r: r["id"]) == expected
    # The snapshot the DoPut reported is readable by time travel and holds its three rows.
    assert scalar(conn, f"SELECT count(*) FROM mix.t AT (VERSION => {put['snapshot_id']})") == 3
    assert sql(conn, 'SELECT count(*) AS n FROM mix."t$snapshots"').column("n").to_pylist() == [5]


def test_adbc_ingest_then_sql(conn: Any, reader_catalog: Any) -> None:
    data = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "s": ["x", "y", "z"]})
    update(conn, "CREATE SCHEMA mix_b")
    with conn.cursor() as cur:
        cur.adbc_ingest("t", data, mode="create", db_schema_name="mix_b")
    head = log_head(reader_catalog)
    assert update(conn, "DELETE FROM mix_b.t WHERE k = 2") == 1
    assert update(conn, "INSERT INTO mix_b.t SELECT k + 10, s FROM mix_b.t") == 2
    assert rows(conn, "SELECT k FROM mix_b.t ORDER BY k") == [{"k": 1}, {"k": 3}, {"k": 11}, {"k": 13}]
    assert [r.operation for r in log_records(reader_catalog, head)] == ["delete", "append"]


def test_metadata_tables_after_maintenance(conn: Any, write_server: ServerProcess) -> None:
    update(conn, "CREATE SCHEMA mix_c")
    update(conn, "CREATE TABLE mix_c.t (id BIGINT, v VARCHAR)")
    for i in range(6):
        update(conn, f"INSERT INTO mix_c.t VALUES ({i}, 'v{i}')")
    update(conn, "DELETE FROM mix_c.t WHERE id = 0")
    before = scalar(conn, 'SELECT max_by(snapshot_id, committed_at) FROM mix_c."t$snapshots"')
    assert scalar(conn, 'SELECT count(*) FROM mix_c."t$files"') == 5
    client = flight.FlightClient(write_server.location)
    try:
        reports = [json.loads(r.body.to_pybytes()) for r in
                   client.do_action(flight.Action("icefloe.maintain", json.dumps({"table": "mix_c.t"}).encode()))]
    finally:
        client.close()
    assert len(reports) == 1
    files = rows(conn, 'SELECT record_count FROM mix_c."t$files"')
    assert len(files) < 5 and sum(f["record_count"] for f in files) == 5  # compacted, same rows
    snaps = rows(conn, 'SELECT snapshot_id, operation FROM mix_c."t$snapshots" ORDER BY committed_at')
    # Compaction is one more snapshot (Iceberg "replace", or "overwrite" as pyiceberg writes it),
    # then a manifest merge that drops its manifest of DELETED entries from the current snapshot
    # (an "append" of no files, as pyiceberg's merging append writes it).
    assert snaps[-2]["operation"] in ("replace", "overwrite") and snaps[-3]["snapshot_id"] == before
    assert snaps[-1]["operation"] == "append"
    assert rows(conn, "SELECT id FROM mix_c.t ORDER BY id") == [{"id": i} for i in range(1, 6)]
    assert scalar(conn, f"SELECT count(*) FROM mix_c.t AT (VERSION => {before})") == 5
    history = rows(conn, 'SELECT snapshot_id FROM mix_c."t$history" ORDER BY made_current_at')
    assert [h["snapshot_id"] for h in history] == [s["snapshot_id"] for s in snaps]
