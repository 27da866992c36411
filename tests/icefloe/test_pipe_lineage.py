"""A pipe's sink commit is an OpenLineage run with the source as input dataset and the declared
column lineage (none when not declared), valid against the official schemas."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lineage_collector import Collector, validate_event
from servers import ServerProcess

import icefloe

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    for key in list(os.environ):
        if key.startswith("OPENLINEAGE"):
            monkeypatch.delenv(key)
    c = Collector().up()
    try:
        yield c
    finally:
        c.down()


def _complete(events: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    return [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == job]


def test_pipe_commits_carry_input_and_column_lineage(collector: Collector, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    home = tmp_path / "home"
    home.mkdir()
    server = ServerProcess(warehouse, ["--lineage-namespace", "prod"],
                           env={"OPENLINEAGE_URL": collector.url, "HOME": str(home)}, cwd=home).start()
    try:
        with icefloe.connect(server.location) as lake:
            lake.create_namespace("sales")
            orders = lake.create_table("sales.orders", schema=SCHEMA)
            daily = lake.create_table("sales.daily", schema=pa.schema([("total", pa.int64())]))
            plain = lake.create_table("sales.copy", schema=SCHEMA)
            orders.append(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA))

            def total(rows: pa.Table) -> pa.Table:
                return pa.table({"total": [pa.compute.sum(rows["v"]).as_py()]})

            icefloe.pipe(source=orders, transform=total, sink=daily, columns={"total": ["v"]},
                         checkpoint="daily-job", once=True)
            icefloe.pipe(source=orders, sink=plain, checkpoint="copy-job", once=True)
        events = collector.wait_for(lambda ev: bool(_complete(ev, "icefloe.pipe.daily-job"))
                                    and bool(_complete(ev, "icefloe.pipe.copy-job")))
    finally:
        server.stop()
    for event in events:
        validate_event(event)
    [run] = _complete(events, "icefloe.pipe.daily-job")
    assert [(i["namespace"], i["name"]) for i in run["inputs"]] == [("prod", "sales.orders")]
    [output] = run["outputs"]
    assert output["name"] == "sales.daily"
    lineage = output["facets"]["columnLineage"]["fields"]
    assert lineage == {"total": {"inputFields": [{"namespace": "prod", "name": "sales.orders", "field": "v"}]}}
    [copy] = _complete(events, "icefloe.pipe.copy-job")
    assert [(i["namespace"], i["name"]) for i in copy["inputs"]] == [("prod", "sales.orders")]
    assert "columnLineage" not in copy["outputs"][0]["facets"]  # not declared: never guessed


def test_an_in_process_pipe_commit_records_the_same_lineage(tmp_path: Path) -> None:
    from catalog.lineage import LineageSettings, build_commit_events
    from flight_server.feed.rows import load_commit_metadata

    with icefloe.open(tmp_path / "warehouse") as lake:
        lake.create_namespace("sales")
        orders = lake.create_table("sales.orders", schema=SCHEMA)
        daily = lake.create_table("sales.daily", schema=pa.schema([("total", pa.int64())]))
        orders.append(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA))
        icefloe.pipe(source=orders, sink=daily, checkpoint="daily-job", columns={"total": ["v"]}, once=True,
                     transform=lambda rows: pa.table({"total": [pa.compute.sum(rows["v"]).as_py()]}))
        catalog = lake.backend.catalog  # type: ignore[attr-defined]
        record = catalog.log.get(catalog.log.head())
        assert record.qualified_name == "sales.daily" and record.extra["pipe"]["source_seq"] == record.seq - 1
        metadata, _ = load_commit_metadata(catalog, record)
        events = build_commit_events(record, metadata, LineageSettings(namespace="local"))
    for event in events:
        validate_event(event)
    complete = events[-1]
    assert complete["job"]["name"] == "icefloe.pipe.daily-job"
    assert [i["name"] for i in complete["inputs"]] == ["sales.orders"]
    fields = complete["outputs"][0]["facets"]["columnLineage"]["fields"]
    assert fields == {"total": {"inputFields": [{"namespace": "local", "name": "sales.orders", "field": "v"}]}}
