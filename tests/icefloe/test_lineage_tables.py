"""Queryable lineage after a chain source -> table -> pipe -> table: the SQL tables
``icefloe.lineage.edges`` / ``runs`` / ``column_edges`` answer upstream and downstream questions
(recursive queries over the edges), kept from the same events the server emits."""

from __future__ import annotations

from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from servers import ServerProcess
from test_ingest_server import count, wait_for

import icefloe

RAW = pa.schema([("id", pa.int64()), ("amount", pa.int64())])
UPSTREAM = """
WITH RECURSIVE up(name, depth) AS (
  SELECT '{table}', 0
  UNION
  SELECT e.source, up.depth + 1 FROM icefloe.lineage.edges e JOIN up ON e.target = up.name WHERE up.depth < 10
)
SELECT name, min(depth) AS depth FROM up WHERE depth > 0 GROUP BY name ORDER BY depth, name
"""
DOWNSTREAM = """
WITH RECURSIVE down(name, depth) AS (
  SELECT '{table}', 0
  UNION
  SELECT e.target, down.depth + 1 FROM icefloe.lineage.edges e JOIN down ON e.source = down.name
  WHERE down.depth < 10
)
SELECT name, min(depth) AS depth FROM down WHERE depth > 0 GROUP BY name ORDER BY depth, name
"""


def query(location: str, sql: str) -> list[tuple[object, ...]]:
    with flight_sql.connect(location) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def test_upstream_and_downstream_of_a_source_table_pipe_table_chain(tmp_path: Path) -> None:
    warehouse, src = tmp_path / "warehouse", tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "amount": [5, 6, 7]}, RAW), src / "a.parquet")
    config = tmp_path / "connectors.toml"
    config.write_text(f'[connectors.raw]\ntable = "sales.raw"\nsource = "files"\npoll_s = 0.1\n\n'
                      f'[connectors.raw.options]\npath = "{src}"\n')
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("sales")
        lake.create_table("sales.raw", schema=RAW)
        lake.create_table("sales.daily", schema=pa.schema([("total", pa.int64())]))
    proc = ServerProcess(warehouse, ["--ingest-config", str(config), "--lineage-namespace", "prod"]).start()
    try:
        wait_for(lambda: count(proc, "sales.raw") == 3)
        with icefloe.connect(proc.location) as lake:
            def total(rows: pa.Table) -> pa.Table:
                return pa.table({"total": [pc.sum(rows["amount"]).as_py()]})

            icefloe.pipe(source=lake.table("sales.raw"), transform=total, sink=lake.table("sales.daily"),
                         columns={"total": ["amount"]}, checkpoint="daily", once=True)
        upstream = query(proc.location, UPSTREAM.format(table="sales.daily"))
        assert upstream == [("sales.raw", 1), (str(src), 2)]
        downstream = query(proc.location, DOWNSTREAM.format(table=str(src)))
        assert downstream == [("sales.raw", 1), ("sales.daily", 2)]
        assert query(proc.location, DOWNSTREAM.format(table="sales.daily")) == []
        edges = query(proc.location, "SELECT source_namespace, source, target, job, runs FROM icefloe.lineage.edges "
                                     "ORDER BY target")
        assert edges == [("prod", "sales.raw", "sales.daily", "icefloe.pipe.daily", 1),
                         ("file", str(src), "sales.raw", "icefloe.ingest.raw", 1)]
        columns = query(proc.location, "SELECT source, source_column, target, target_column "
                                       "FROM icefloe.lineage.column_edges")
        assert columns == [("sales.raw", "amount", "sales.daily", "total")]
        runs = query(proc.location, "SELECT job, output, inputs FROM icefloe.lineage.runs "
                                    "WHERE output = 'sales.daily' AND job LIKE 'icefloe.pipe.%'")
        assert runs == [("icefloe.pipe.daily", "sales.daily", ["sales.raw"])]
        # The index survives a restart and is not built twice.
        proc.restart()
        assert query(proc.location, "SELECT count(*) FROM icefloe.lineage.edges") == [(2,)]
        assert query(proc.location, "SELECT sum(runs) FROM icefloe.lineage.edges") == [(2,)]
    finally:
        proc.stop()
    assert "Traceback" not in proc.log
