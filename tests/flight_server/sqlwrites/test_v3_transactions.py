"""Writes to a format-v3 table inside a Flight SQL transaction (ADBC autocommit=False) are
refused as they are outside one: INVALID_ARGUMENT with the v3 message, nothing committed, and
the server goes on. An empty v3 table (no snapshot yet) took another path than a full one."""

from __future__ import annotations

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pytest
from servers import ServerProcess
from storage_kinds import Warehouse, open_catalog, start_server

V3 = "the table is Iceberg format v3; icefloe reads v3 tables but cannot write them yet"
WRITES = [
    "INSERT INTO ns.v3 VALUES (1)",
    "INSERT INTO ns.v3 SELECT 2",
    "UPDATE ns.v3 SET a = 2",
    "DELETE FROM ns.v3 WHERE a = 1",
    "MERGE INTO ns.v3 t USING (SELECT 1 AS a) s ON t.a = s.a WHEN NOT MATCHED THEN INSERT VALUES (s.a)",
]


@pytest.fixture
def v3_server(warehouse: Warehouse) -> ServerProcess:
    cat = open_catalog(warehouse, "setup")
    cat.create_namespace("ns")
    cat.create_table("ns.v3", pa.schema([pa.field("a", pa.int32())]), properties={"format-version": "3"})
    cat.close()
    return start_server(warehouse).start()


def _snapshots(cur: fsql.Cursor) -> int:
    cur.execute('SELECT count(*) FROM ns."v3$snapshots"')
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def test_v3_writes_in_a_transaction_are_refused(v3_server: ServerProcess) -> None:
    try:
        with fsql.connect(v3_server.location, autocommit=False) as conn:
            for sql in WRITES:
                with conn.cursor() as cur, pytest.raises(fsql.Error) as caught:
                    cur.execute(sql)
                assert str(caught.value).startswith("INVALID_ARGUMENT") and V3 in str(caught.value), (sql, caught.value)
                conn.rollback()
            with conn.cursor() as cur, pytest.raises(fsql.Error) as caught:
                cur.adbc_ingest("v3", pa.table({"a": pa.array([1], pa.int32())}), mode="append", db_schema_name="ns")
            assert str(caught.value).startswith("INVALID_ARGUMENT") and V3 in str(caught.value), caught.value
            conn.rollback()
        with fsql.connect(v3_server.location, autocommit=True) as conn, conn.cursor() as cur:
            assert _snapshots(cur) == 0  # nothing committed
            cur.execute("SELECT count(*) FROM ns.v3")
            assert cur.fetchall() == [(0,)]
    finally:
        v3_server.stop()
