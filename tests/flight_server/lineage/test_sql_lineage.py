"""Lineage of SQL writes through a real server process and the ADBC driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import pytest
from lineage_collector import Collector, validate_event
from servers import ServerProcess

from catalog import RocksCatalog


def _runs(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        runs.setdefault(event["run"]["runId"], []).append(event)
    return runs


def test_insert_select_names_inputs_and_failed_sql_write_is_a_fail_run(ol_env: Collector, warehouse: Path) -> None:
    proc = ServerProcess(warehouse, ["--lineage-namespace", "prod"], env={"OPENLINEAGE_URL": ol_env.url}).start()
    try:
        with flight_sql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA ns")
            cur.execute("CREATE TABLE ns.src (id BIGINT NOT NULL, v VARCHAR)")
            cur.execute("INSERT INTO ns.src VALUES (1, 'a'), (2, 'b')")
            cur.execute("CREATE TABLE ns.dst (id BIGINT NOT NULL, v VARCHAR)")
            cur.execute("INSERT INTO ns.dst SELECT id, v FROM ns.src WHERE id > 1")
            with pytest.raises(Exception, match="ns.dst"):
                cur.execute("INSERT INTO ns.dst SELECT NULL, v FROM ns.src")  # NULL into a required column
        # 4 commits (create, insert, create, insert) x START/COMPLETE + one START/FAIL
        events = ol_env.wait_count(4 * 2 + 2)
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log
    for event in events:
        validate_event(event)
    cat = RocksCatalog("check", warehouse=str(warehouse))
    try:
        assert cat.log.head() == 4  # the failing INSERT committed nothing
    finally:
        cat.close()
    runs = _runs(events)
    completes = [e for e in events if e["eventType"] == "COMPLETE"]
    insert_select = [e for e in completes if e["outputs"][0]["name"] == "ns.dst" and e.get("inputs")]
    assert len(insert_select) == 1
    assert [i["name"] for i in insert_select[0]["inputs"]] == ["ns.src"]
    assert all(i["namespace"] == "prod" for i in insert_select[0]["inputs"])
    fails = [pair for pair in runs.values() if any(e["eventType"] == "FAIL" for e in pair)]
    assert len(fails) == 1
    start, fail = sorted(fails[0], key=lambda e: e["eventType"] != "START")
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["outputs"][0]["name"] == "ns.dst"
    assert fail["run"]["facets"]["errorMessage"]["message"]
