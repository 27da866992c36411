"""The exporter on a real catalog, sending to a real local HTTP collector."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lineage_collector import Collector, validate_event
from lineage_support import SETTINGS, Opener
from pyiceberg.types import DoubleType

from catalog import RocksCatalog, commit_context, keys
from catalog.lineage import LineageExporter, build_commit_events

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _facets(event: dict[str, Any]) -> dict[str, Any]:
    return event["outputs"][0].get("facets") or {}


def _runs(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        runs.setdefault(e["run"]["runId"], []).append(e)
    return runs


def _write_everything(cat: RocksCatalog) -> None:
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA))
    table.overwrite(pa.table({"id": [4], "name": ["d"]}, schema=SCHEMA))
    table = cat.load_table("ns.t")
    table.append(pa.table({"id": [5, 6], "name": ["e", "f"]}, schema=SCHEMA))
    cat.load_table("ns.t").delete("id = 4")  # a whole file: an Iceberg delete
    with cat.load_table("ns.t").update_schema() as update:
        update.add_column("score", DoubleType())
    cat.rename_table("ns.t", "ns.u")
    cat.drop_table("ns.u")


def test_every_write_kind_is_a_valid_start_complete_run(ol_env: Collector, opener: Opener) -> None:
    cat, _ = opener.open()
    _write_everything(cat)
    records = list(cat.log.read(0))
    assert [r.operation for r in records] == [
        "create",
        "append",
        "overwrite",
        "append",
        "delete",
        "schema",
        "rename",
        "drop",
    ]
    events = ol_env.wait_count(2 * len(records))
    assert len(events) == 2 * len(records)
    for event in events:
        validate_event(event)
        assert event["producer"].startswith("urn:icefloe:")
        assert event["job"]["namespace"] == "icefloe-test"
        job_type = event["job"]["facets"]["jobType"]
        assert (job_type["processingType"], job_type["integration"]) == ("BATCH", "ICEFLOE")
        assert event["run"]["facets"]["processing_engine"]["name"] == "icefloe"
    runs = _runs(events)
    assert len(runs) == len(records)
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for run_id, pair in runs.items():
        assert [e["eventType"] for e in pair] == ["START", "COMPLETE"]  # delivered in order
        assert uuid.UUID(run_id).version == 7
        assert pair[0]["eventTime"] <= pair[1]["eventTime"]
        by_seq[pair[1]["run"]["facets"]["icefloe_commit"]["seq"]] = pair
    for record in records:
        start, complete = by_seq[record.seq]
        assert complete["job"]["facets"]["jobType"]["jobType"] == record.operation.upper()
        assert complete["job"]["name"] == f"icefloe.{record.operation}.{record.qualified_name}"
        out = complete["outputs"][0]
        assert (out["namespace"], out["name"]) == ("icefloe-test", record.qualified_name)
        assert _facets(complete)["catalog"]["framework"] == "iceberg"
        assert _facets(complete)["storage"] == {
            **_facets(complete)["storage"],
            "storageLayer": "iceberg",
            "fileFormat": "parquet",
        }
        if record.snapshot_id is not None and record.operation != "drop":
            assert _facets(complete)["version"]["datasetVersion"] == str(record.snapshot_id)
        assert "version" not in _facets(start)
        if record.added_rows is not None:
            stats = out["outputFacets"]["outputStatistics"]
            assert stats["rowCount"] == record.added_rows and stats["fileCount"] == record.added_files
        lifecycle = {
            "create": "CREATE",
            "overwrite": "OVERWRITE",
            "schema": "ALTER",
            "rename": "RENAME",
            "drop": "DROP",
        }.get(record.operation)
        if lifecycle is None:
            assert "lifecycleStateChange" not in _facets(complete)
        else:
            assert _facets(complete)["lifecycleStateChange"]["lifecycleStateChange"] == lifecycle
    append = by_seq[2][1]
    assert append["outputs"][0]["outputFacets"]["outputStatistics"]["size"] > 0
    assert [f["name"] for f in _facets(append)["schema"]["fields"]] == ["id", "name"]
    schema_change = by_seq[6][1]
    assert [f["name"] for f in _facets(schema_change)["schema"]["fields"]] == ["id", "name", "score"]
    rename = by_seq[7][1]
    assert _facets(rename)["lifecycleStateChange"]["previousIdentifier"] == {
        "namespace": "icefloe-test",
        "name": "ns.t",
    }
    assert "schema" not in _facets(by_seq[8][1])  # a dropped table has no current schema


def test_run_ids_are_deterministic_uuid7_per_commit(ol_env: Collector, opener: Opener) -> None:
    cat, _ = opener.open()
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    events = ol_env.wait_count(4)
    for record in cat.log.read(0):
        rebuilt = build_commit_events(record, None, SETTINGS)
        delivered = [e for e in events if e["run"]["facets"]["icefloe_commit"]["seq"] == record.seq]
        assert {e["run"]["runId"] for e in delivered} == {rebuilt[0]["run"]["runId"]}
        run_id = uuid.UUID(rebuilt[0]["run"]["runId"])
        assert run_id.version == 7
        assert run_id.int >> 80 == record.committed_at_us // 1000  # the commit time is in the id


def test_collector_down_then_up_across_restart_delivers_every_event_once(ol_env: Collector, opener: Opener) -> None:
    ol_env.down()
    cat, exporter = opener.open(max_backoff_s=0.5)
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    for i in range(5):
        table.append(pa.table({"id": [i], "name": [str(i)]}, schema=SCHEMA))  # writes are unaffected
    assert len(cat.load_table("ns.t").scan().to_arrow()) == 5
    head = cat.log.head()
    # Wait until everything is captured into the durable outbox (nothing can be sent).
    # ... and a delivery attempt has failed (the sender process may take a moment to start).
    deadline_ok = _wait(
        lambda: exporter.cursor() == head and exporter.pending() == 2 * head and exporter.send_failures >= 1
    )
    assert deadline_ok, (exporter.cursor(), exporter.pending(), exporter.send_failures)
    assert exporter.delivered == 0
    opener.close(cat, exporter)  # "restart": a new process would see exactly this state

    ol_env.up()
    cat, exporter = opener.open()
    events = ol_env.wait_count(2 * head)
    assert _wait(lambda: exporter.pending() == 0)
    cat.load_table("ns.t").append(pa.table({"id": [9], "name": ["z"]}, schema=SCHEMA))
    events = ol_env.wait_count(2 * head + 2)
    counts = Counter((e["run"]["runId"], e["eventType"]) for e in events)
    assert set(counts.values()) == {1}, "an event was delivered twice"
    assert len(_runs(events)) == head + 1
    seqs = sorted(e["run"]["facets"]["icefloe_commit"]["seq"] for e in events if e["eventType"] == "COMPLETE")
    assert seqs == list(range(1, head + 2))
    for event in events:
        validate_event(event)


def test_cursor_holds_back_commit_log_trimming(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, collector: Collector, opener: Opener
) -> None:
    collector.down()
    monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
    cat, exporter = opener.open()
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    exporter.stop()  # freeze the cursor where it is
    cursor = exporter.cursor()
    assert cursor is not None
    table.append(pa.table({"id": [2], "name": ["b"]}, schema=SCHEMA))
    new_start = cat.log.trim(cat.log.head())
    assert new_start == cursor + 1
    assert [r.seq for r in cat.log.read(cursor)] == list(range(cursor + 1, cat.log.head() + 1))


def test_failed_write_is_a_start_fail_run_and_commits_nothing(ol_env: Collector, opener: Opener) -> None:
    cat, exporter = opener.open()
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    ol_env.wait_count(2)
    head = cat.log.head()
    wrong = pa.table({"other": [1.5]})
    with pytest.raises(ValueError):
        with exporter.track_write(("ns",), "t", "append", principal="alice", extra={"sql": "INSERT INTO ns.t ..."}):
            table.append(wrong)
    assert cat.log.head() == head  # a refused write lands nothing in the commit log
    events = ol_env.wait_count(4)[2:]
    for event in events:
        validate_event(event)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"]
    assert uuid.UUID(events[0]["run"]["runId"]).version == 7
    error = events[1]["run"]["facets"]["errorMessage"]
    assert error["programmingLanguage"] == "PYTHON" and "ValueError" in error["message"]
    assert events[1]["run"]["facets"]["icefloe_commit"]["principal"] == "alice"
    assert events[1]["outputs"][0]["name"] == "ns.t"
    # report_failure directly (e.g. a write refused before it began)
    run_id = exporter.report_failure("ns", "t", "append", "table ns.t does not exist")
    events = ol_env.wait_count(6)[4:]
    assert {e["run"]["runId"] for e in events} == {run_id}
    assert events[1]["run"]["facets"]["errorMessage"]["message"] == "table ns.t does not exist"



class _ClientWentAway(Exception):
    """Stands in for the front end's "the client cancelled or left" error."""


def test_abandoned_write_is_a_start_abort_run(ol_env: Collector, opener: Opener) -> None:
    cat, exporter = opener.open(abort_errors=(_ClientWentAway,))
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    ol_env.wait_count(2)
    with pytest.raises(_ClientWentAway):
        with exporter.track_write(("ns",), "t", "append"):
            raise _ClientWentAway("the client went away mid-stream")
    with pytest.raises(ValueError):
        with exporter.track_write(("ns",), "t", "append"):
            raise ValueError("refused")
    events = ol_env.wait_count(6)[2:]
    for event in events:
        validate_event(event)
    assert [e["eventType"] for e in events] == ["START", "ABORT", "START", "FAIL"]
    assert "went away" in events[1]["run"]["facets"]["errorMessage"]["message"]
    assert exporter.report_failure("ns", "t", "append", "gone", event_type="ABORT") is not None
    assert [e["eventType"] for e in ol_env.wait_count(8)[6:]] == ["START", "ABORT"]
    with pytest.raises(ValueError, match="FAIL or ABORT"):
        exporter.report_failure("ns", "t", "append", "x", event_type="COMPLETE")

def test_principal_is_recorded(ol_env: Collector, opener: Opener) -> None:
    cat, _ = opener.open()
    cat.create_namespace("ns")
    with commit_context(principal="bob"):
        cat.create_table("ns.t", SCHEMA).append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    events = ol_env.wait_count(4)
    assert {e["run"]["facets"]["icefloe_commit"]["principal"] for e in events} == {"bob"}


def test_sql_inputs_and_column_lineage(ol_env: Collector, opener: Opener) -> None:
    cat, _ = opener.open()
    cat.create_namespace("ns")
    src = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("region", pa.string())])
    cat.create_table("ns.orders", src)
    dst_schema = pa.schema([("region", pa.string()), ("total", pa.float64())])
    sql = "INSERT INTO ns.totals SELECT o.region, sum(o.amount * 2) AS total FROM ns.orders o WHERE o.id > 0 GROUP BY 1"
    with commit_context(extra={"sql": sql}):
        dst = cat.create_table("ns.totals", dst_schema)
        dst.append(pa.table({"region": ["eu"], "total": [1.0]}, schema=dst_schema))
    # a dynamic case: the input table is unknown, so no column lineage is claimed
    with commit_context(extra={"sql": "INSERT INTO ns.totals SELECT * FROM ns.mystery"}):
        cat.load_table("ns.totals").append(pa.table({"region": ["us"], "total": [2.0]}, schema=dst_schema))
    events = ol_env.wait_count(8)
    for event in events:
        validate_event(event)
    insert = [e for e in events if e["eventType"] == "COMPLETE"][2]
    assert [(i["namespace"], i["name"]) for i in insert["inputs"]] == [("icefloe-test", "ns.orders")]
    assert insert["job"]["facets"]["sql"]["query"] == sql
    lineage = _facets(insert)["columnLineage"]
    assert lineage["fields"]["region"]["inputFields"] == [
        {
            "namespace": "icefloe-test",
            "name": "ns.orders",
            "field": "region",
            "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
        }
    ]
    assert [(f["field"], f["transformations"][0]["subtype"]) for f in lineage["fields"]["total"]["inputFields"]] == [
        ("amount", "AGGREGATION")
    ]
    assert {(f["field"], f["transformations"][0]["subtype"]) for f in lineage["dataset"]} == {
        ("id", "FILTER"),
        ("region", "GROUP_BY"),
    }
    dynamic = [e for e in events if e["eventType"] == "COMPLETE"][3]
    assert [(i["namespace"], i["name"]) for i in dynamic["inputs"]] == [("icefloe-test", "ns.mystery")]
    assert "columnLineage" not in _facets(dynamic)


def test_rejected_events_go_to_dead_letters_and_do_not_block(ol_env: Collector, opener: Opener) -> None:
    ol_env.reject_status = 400
    cat, exporter = opener.open(max_backoff_s=0.2)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    assert _wait(lambda: exporter.dead_lettered == 2 and exporter.pending() == 0)
    assert sum(1 for _ in cat.store.scan(keys.LINEAGE_DEAD)) == 2
    ol_env.reject_status = None
    cat.load_table("ns.t").append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    events = ol_env.wait_count(2)
    assert [e["job"]["name"] for e in events] == ["icefloe.append.ns.t"] * 2


def _wait(predicate: Any, timeout: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_read_only_catalog_exports_nothing(ol_env: Collector, opener: Opener, tmp_path: Path) -> None:
    cat, exporter = opener.open()
    assert exporter.enabled
    other = RocksCatalog("ro", warehouse=str(tmp_path / "wh"))
    try:
        assert other.read_only
        reader = LineageExporter(other).start(SETTINGS)
        assert reader.report_failure("ns", "t", "append", "boom") is None
        reader.stop()
    finally:
        other.close()


def test_redelivery_after_lost_progress_repeats_the_same_runs(ol_env: Collector, opener: Opener) -> None:
    cat, exporter = opener.open()
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    first = ol_env.wait_count(4)
    opener.close(cat, exporter)
    # As if the cursor's advance had been lost in a crash: capture starts over.
    cat = RocksCatalog("test", warehouse=str(opener.warehouse))
    cat.store.write({keys.LINEAGE_CURSOR: keys.encode_u64(0)})
    cat.close()
    cat, exporter = opener.open()
    again = ol_env.wait_count(8)[4:]

    def strip(event: dict[str, Any]) -> dict[str, Any]:
        run = {**event["run"], "facets": {k: v for k, v in event["run"]["facets"].items() if k != "tags"}}
        return {**event, "run": run}

    assert [strip(e) for e in again] == [strip(e) for e in first]  # same runIds, same content


def test_a_later_metadata_gives_each_data_commit_its_own_schema(tmp_path: Path) -> None:
    from catalog.lineage.events import commit_schema

    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh2"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", SCHEMA)
        table.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
        with cat.load_table("ns.t").update_schema() as update:
            update.add_column("score", DoubleType())
        wider = pa.schema([*SCHEMA, pa.field("score", pa.float64())])
        cat.load_table("ns.t").append(pa.table({"id": [2], "name": ["b"], "score": [1.0]}, schema=wider))
        latest = cat.load_table("ns.t").metadata
        first, schema_change, second = list(cat.log.read(1))
        assert [f.name for f in commit_schema(latest, first).fields] == ["id", "name"]
        assert [f.name for f in commit_schema(latest, second).fields] == ["id", "name", "score"]
        events = build_commit_events(first, latest, SETTINGS)
        assert [f["name"] for f in events[1]["outputs"][0]["facets"]["schema"]["fields"]] == ["id", "name"]
    finally:
        cat.close()


def test_a_dead_sender_process_is_replaced(ol_env: Collector, opener: Opener) -> None:
    from catalog.lineage.sender import ChildSender

    cat, exporter = opener.open()
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    ol_env.wait_count(2)
    # Killed only once the exporter has the sender's acknowledgement of both events: a kill
    # between the collector's receipt and that acknowledgement rightly has them sent again
    # (delivery is at least once), which is not what this test is about.
    assert _wait(lambda: exporter.cursor() == cat.log.head() and exporter.pending() == 0)
    sender = exporter._sender
    assert isinstance(sender, ChildSender) and sender._proc is not None
    sender._proc.kill()
    sender._proc.wait()
    cat.load_table("ns.t").append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    events = ol_env.wait_count(4)
    assert [e["job"]["name"] for e in events[2:]] == ["icefloe.append.ns.t"] * 2


def test_stopping_while_the_collector_hangs_loses_nothing(ol_env: Collector, opener: Opener) -> None:
    ol_env.hang.set()
    cat, exporter = opener.open()
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    assert _wait(lambda: exporter.cursor() == cat.log.head())
    import time as _time

    _time.sleep(0.5)  # the sender is now waiting on the collector
    opener.close(cat, exporter)
    assert exporter._thread is not None and not exporter._thread.is_alive()
    ol_env.hang.clear()
    cat, exporter = opener.open()  # nothing was lost: the run is delivered after the restart
    events = ol_env.wait_count(2)
    assert [e["eventType"] for e in events[-2:]] == ["START", "COMPLETE"]
