"""A Flight SQL transaction that writes two tables is one lineage run (both outputs, one runId)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
from lineage_collector import Collector, validate_event
from servers import ServerProcess


def test_transaction_is_one_lineage_run(ol_env: Collector, warehouse: Path) -> None:
    proc = ServerProcess(warehouse, env={"OPENLINEAGE_URL": ol_env.url}).start()
    try:
        with flight_sql.connect(proc.location, autocommit=True) as setup, setup.cursor() as cur:
            cur.execute("CREATE SCHEMA ns")
            cur.execute("CREATE TABLE ns.a (id BIGINT)")
            cur.execute("CREATE TABLE ns.b (id BIGINT)")
        with flight_sql.connect(proc.location, autocommit=False) as conn:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO ns.a VALUES (1)")
                cur.execute("INSERT INTO ns.b VALUES (1)")
            conn.commit()
        # 3 creates x START/COMPLETE, then the transaction: START/COMPLETE per table, one run
        # 2 creates x START/COMPLETE, then the transaction: START/COMPLETE per table, one run
        events = ol_env.wait_count(2 * 2 + 4)
    finally:
        assert proc.stop() == 0
    for event in events:
        validate_event(event)
    runs: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        runs.setdefault(event["run"]["runId"], []).append(event)
    txn_runs = [run for run in runs.values() if len(run) == 4]
    assert len(runs) == 3 and len(txn_runs) == 1, [(e["eventType"], e["job"]["name"]) for e in events]
    run = txn_runs[0]
    assert {e["job"]["name"] for e in run} == {"icefloe.transaction"}
    assert sorted(o["name"] for e in run if e["eventType"] == "COMPLETE" for o in e["outputs"]) == ["ns.a", "ns.b"]
