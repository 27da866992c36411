"""Lineage of DoPut appends and ADBC ingest through real server processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from lineage_collector import Collector, validate_event
from servers import ROOT, ServerProcess

from catalog import RocksCatalog

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "v": [f"r{i}" for i in range(start, start + n)]}, SCHEMA)


def _make_table(warehouse: Path, name: str = "ns.t") -> None:
    cat = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        cat.create_namespace(tuple(name.split(".")[:-1]))
        cat.create_table(name, SCHEMA)
    finally:
        cat.close()


def _server(warehouse: Path, collector: Collector) -> ServerProcess:
    return ServerProcess(warehouse, ["--lineage-namespace", "prod"], env={"OPENLINEAGE_URL": collector.url})


def _completes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["eventType"] == "COMPLETE"]


def _append_runs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in _completes(events) if e["job"]["name"].startswith("icefloe.append.")]


def test_doput_and_ingest_are_runs(ol_env: Collector, warehouse: Path) -> None:
    _make_table(warehouse)
    proc = _server(warehouse, ol_env).start()
    try:
        results = [do_put(proc.location, ("ns", "t"), _rows(n, 10 * n)) for n in (1, 2, 3)]
        with flight_sql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            assert cur.adbc_ingest("events", _rows(5), mode="create", db_schema_name="fresh") == 5
        events = ol_env.wait_count(2 * 3 + 2)  # three DoPut runs and one ingest run (create with rows)
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log
    for event in events:
        validate_event(event)
        assert event["job"]["namespace"] == "prod"
    appends = [e for e in _completes(events) if e["job"]["name"] == "icefloe.append.ns.t"]
    assert [e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] for e in appends] == [1, 2, 3]
    assert [e["outputs"][0]["facets"]["version"]["datasetVersion"] for e in appends] == [
        str(r["snapshot_id"]) for r in results
    ]
    assert [e["run"]["facets"]["icefloe_commit"]["seq"] for e in appends] == [r["commit_seq"] for r in results]
    ingest = [e for e in _completes(events) if e["outputs"][0]["name"] == "fresh.events"]
    assert [e["job"]["name"] for e in ingest] == ["icefloe.create.fresh.events"]
    assert ingest[0]["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert ingest[0]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 5
    starts = {e["run"]["runId"]: e for e in events if e["eventType"] == "START"}
    for complete in _completes(events):
        start = starts[complete["run"]["runId"]]
        assert start["eventTime"] <= complete["eventTime"]  # START is when the write began


def test_refused_doputs_are_fail_runs_and_commit_nothing(ol_env: Collector, warehouse: Path) -> None:
    _make_table(warehouse)
    proc = _server(warehouse, ol_env).start()
    try:
        bad = pa.table({"id": pa.array(["not a number"])})
        with pytest.raises(pa.ArrowInvalid, match="schema mismatch"):
            do_put(proc.location, ("ns", "t"), bad)
        with pytest.raises(Exception, match="does not exist"):
            do_put(proc.location, ("ns", "missing"), _rows(1))
        events = ol_env.wait_count(4)
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log
    cat = RocksCatalog("check", warehouse=str(warehouse))
    try:
        assert cat.log.head() == 1  # only the offline create: nothing was committed
    finally:
        cat.close()
    for event in events:
        validate_event(event)
    runs: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        runs.setdefault(e["run"]["runId"], []).append(e)
    assert len(runs) == 2
    by_table = {pair[0]["outputs"][0]["name"]: pair for pair in runs.values()}
    for name, needle in (("ns.t", "schema mismatch"), ("ns.missing", "does not exist")):
        start, fail = by_table[name]
        assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
        assert uuid.UUID(fail["run"]["runId"]).version == 7
        assert needle in fail["run"]["facets"]["errorMessage"]["message"]
        assert fail["job"]["name"] == f"icefloe.append.{name}"


def test_collector_down_restart_then_up_every_doput_event_once(ol_env: Collector, warehouse: Path) -> None:
    _make_table(warehouse)
    ol_env.down()
    proc = _server(warehouse, ol_env).start()
    try:
        results = [do_put(proc.location, ("ns", "t"), _rows(2, 2 * i)) for i in range(6)]  # writes unaffected
        assert [r["rows"] for r in results] == [2] * 6
    finally:
        assert proc.stop() == 0
    ol_env.up()
    proc = _server(warehouse, ol_env).start()
    try:
        ol_env.wait_for(lambda ev: len(_append_runs(ev)) == 6)
        results.append(do_put(proc.location, ("ns", "t"), _rows(1, 100)))
        events = ol_env.wait_for(lambda ev: len(_append_runs(ev)) == 7)
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log
    counts = Counter((e["run"]["runId"], e["eventType"]) for e in events)
    assert set(counts.values()) == {1}  # nothing twice (maintenance commits, if any, count too)
    seqs = [e["run"]["facets"]["icefloe_commit"]["seq"] for e in _append_runs(events)]
    assert seqs == [r["commit_seq"] for r in results]
    for event in events:
        validate_event(event)


def test_server_killed_then_restarted_loses_no_event(ol_env: Collector, warehouse: Path) -> None:
    _make_table(warehouse)
    ol_env.down()
    proc = _server(warehouse, ol_env).start()
    try:
        results = [do_put(proc.location, ("ns", "t"), _rows(1, i)) for i in range(4)]
    finally:
        proc.kill()  # SIGKILL: no clean shutdown of the worker, the sender or RocksDB
    ol_env.up()
    proc = _server(warehouse, ol_env).start()
    try:
        events = ol_env.wait_for(
            lambda ev: (
                {e["run"]["facets"]["icefloe_commit"]["seq"] for e in _append_runs(ev)}
                >= {r["commit_seq"] for r in results}
            )
        )
    finally:
        assert proc.stop() == 0
    for event in events:
        validate_event(event)
    starts = {e["run"]["runId"] for e in events if e["eventType"] == "START"}
    assert all(e["run"]["runId"] in starts for e in _append_runs(events))  # every run has its START


# A client that starts a write, sends part of it and then stops answering (killed by the test).
_ABANDONING_CLIENT = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa, pyarrow.flight as flight
    location, mode = sys.argv[1], sys.argv[2]
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    batch = pa.record_batch([pa.array(range(1000), pa.int64()), pa.array(["x"] * 1000)], schema=schema)

    def batches():
        for _ in range(3):
            yield batch
        print("sent", flush=True)
        time.sleep(120)

    if mode == "doput":
        writer, _ = flight.FlightClient(location).do_put(flight.FlightDescriptor.for_path("ns", "t"), schema)
        for item in batches():
            writer.write_batch(item)
    else:
        import adbc_driver_flightsql.dbapi as flight_sql
        with flight_sql.connect(location, autocommit=True) as conn, conn.cursor() as cur:
            cur.adbc_ingest("t", pa.RecordBatchReader.from_batches(schema, batches()), mode="append",
                            db_schema_name="ns")
    """
)


def _runs(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        runs.setdefault(e["run"]["runId"], []).append(e)
    return runs


@pytest.mark.parametrize("mode", ["doput", "ingest"])
def test_abandoned_stream_is_an_abort_run(ol_env: Collector, warehouse: Path, mode: str) -> None:
    """A client that goes away mid-stream did not fail a write: START then ABORT, nothing committed."""
    _make_table(warehouse)
    proc = _server(warehouse, ol_env).start()
    try:
        child = subprocess.Popen([sys.executable, "-c", _ABANDONING_CLIENT, proc.location, mode],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "sent"
            time.sleep(1.0)  # let the batches reach the server
        finally:
            child.kill()
            child.wait()
        events = ol_env.wait_count(2)
        do_put(proc.location, ("ns", "t"), _rows(2))  # the server goes on; a refused write is still FAIL
        with pytest.raises(pa.ArrowInvalid, match="schema mismatch"):
            do_put(proc.location, ("ns", "t"), pa.table({"id": pa.array(["not a number"])}))
        events = ol_env.wait_count(6)
    finally:
        assert proc.stop() == 0
    assert "Traceback" not in proc.log
    for event in events:
        validate_event(event)
    runs = list(_runs(events).values())
    types = sorted(tuple(e["eventType"] for e in run) for run in runs)
    assert types == [("START", "ABORT"), ("START", "COMPLETE"), ("START", "FAIL")]
    start, abort = next(run for run in runs if run[-1]["eventType"] == "ABORT")
    assert start["outputs"][0]["name"] == abort["outputs"][0]["name"] == "ns.t"
    assert "went away" in abort["run"]["facets"]["errorMessage"]["message"]
    fail = next(run for run in runs if run[-1]["eventType"] == "FAIL")[-1]
    assert "schema mismatch" in fail["run"]["facets"]["errorMessage"]["message"]
    cat = RocksCatalog("check", warehouse=str(warehouse))
    try:
        assert cat.log.head() == 2  # the offline create and the one good DoPut
    finally:
        cat.close()


def test_doput_cancelled_by_its_deadline_is_an_abort_run(ol_env: Collector, warehouse: Path) -> None:
    _make_table(warehouse)
    proc = _server(warehouse, ol_env).start()
    try:
        client = flight.FlightClient(proc.location)
        try:
            data = _rows(100)
            options = flight.FlightCallOptions(timeout=1.0)
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), data.schema, options=options)
            writer.write_table(data)
            time.sleep(2.0)  # past the deadline: gRPC cancels the call
            with pytest.raises(pa.ArrowException):
                writer.done_writing()
                reader.read()
                writer.close()
        finally:
            client.close()
        events = ol_env.wait_count(2)
    finally:
        assert proc.stop() == 0
    for event in events:
        validate_event(event)
    assert [e["eventType"] for e in events] == ["START", "ABORT"]
    cat = RocksCatalog("check", warehouse=str(warehouse))
    try:
        assert cat.log.head() == 1
    finally:
        cat.close()
