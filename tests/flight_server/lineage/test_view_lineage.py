"""OpenLineage events for views: a view created, replaced, registered and dropped over REST and
one created and dropped with SQL over Flight SQL. Each is a dataset of type VIEW with the
view's schema and lifecycle state; its query is the job's SQL, and the tables it reads are the
run's inputs (with column lineage when the query names their columns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import httpx
from lineage_collector import Collector, validate_event
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import ViewVersion
from servers import ServerProcess

from tests.flight_server.web.rest_support import rest_url

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def _version(sql: str) -> ViewVersion:
    return ViewVersion(**{  # type: ignore[arg-type]
        "version-id": 1, "schema-id": 0, "timestamp-ms": 1_700_000_000_000, "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}], "default-namespace": ["lv"],
    })


def _complete(events: list[dict[str, Any]], job_prefix: str) -> list[dict[str, Any]]:
    return [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith(job_prefix)]


def test_view_changes_are_lineage_events_of_a_view_dataset(ol_env: Collector, warehouse: Path) -> None:
    proc = ServerProcess(warehouse, ["--rest-port", "0"], env={"OPENLINEAGE_URL": ol_env.url}).start()
    try:
        rest = RestCatalog("icefloe", uri=rest_url(proc))
        rest.create_namespace("lv")
        rest.create_table("lv.base", SCHEMA)
        view = rest.create_view("lv.v", SCHEMA, _version("SELECT id, name FROM lv.base WHERE id > 0"))
        location = httpx.get(f"{rest_url(proc)}/v1/namespaces/lv/views/v", timeout=10).json()["metadata-location"]
        replaced = httpx.post(f"{rest_url(proc)}/v1/namespaces/lv/views/v", timeout=10, json={
            "requirements": [{"type": "assert-view-uuid", "uuid": str(view.metadata.view_uuid)}],
            "updates": [
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                    {"id": 1, "name": "n", "type": "long", "required": False}]}},
                {"action": "add-view-version", "view-version": {
                    "version-id": 2, "schema-id": -1, "timestamp-ms": 1_700_000_000_001, "summary": {},
                    "representations": [{"type": "sql", "sql": "SELECT count(id) AS n FROM lv.base",
                                         "dialect": "spark"}],
                    "default-namespace": ["lv"]}},
                {"action": "set-current-view-version", "view-version-id": -1},
            ]})
        assert replaced.status_code == 200, replaced.text
        rest.drop_view("lv.v")
        registered = httpx.post(f"{rest_url(proc)}/v1/namespaces/lv/register-view", timeout=10,
                                json={"name": "again", "metadata-location": location})
        assert registered.status_code == 200, registered.text
        with flight_sql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE VIEW lv.sqlv AS SELECT name FROM lv.base")
            cur.execute("DROP VIEW lv.sqlv")
        # namespace-less: create table, then 6 view commits, START + COMPLETE each
        events = ol_env.wait_count(2 * 7)
    finally:
        assert proc.stop() == 0
    for event in events:
        validate_event(event)
    by_operation = {e["run"]["facets"]["icefloe_commit"]["operation"]: e for e in _complete(events, "icefloe.view-")}
    assert sorted(by_operation) == ["view-create", "view-drop", "view-register", "view-replace"]
    assert len(_complete(events, "icefloe.view-create")) == 2 and len(_complete(events, "icefloe.view-drop")) == 2

    created = _complete(events, "icefloe.view-create.lv.v")[0]
    output = created["outputs"][0]
    assert output["name"] == "lv.v" and output["facets"]["datasetType"]["datasetType"] == "VIEW"
    assert "storage" not in output["facets"]
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["id", "name"]
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert created["job"]["facets"]["sql"]["query"] == "SELECT id, name FROM lv.base WHERE id > 0"
    assert created["job"]["facets"]["sql"]["dialect"] == "spark"
    assert [i["name"] for i in created["inputs"]] == ["lv.base"]
    lineage = output["facets"]["columnLineage"]["fields"]
    assert lineage["id"]["inputFields"][0]["name"] == "lv.base" and lineage["id"]["inputFields"][0]["field"] == "id"
    assert lineage["name"]["inputFields"][0]["field"] == "name"

    replace = by_operation["view-replace"]
    assert replace["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "ALTER"
    assert [f["name"] for f in replace["outputs"][0]["facets"]["schema"]["fields"]] == ["n"]
    assert replace["outputs"][0]["facets"]["version"]["datasetVersion"] == "2"
    subtype = replace["outputs"][0]["facets"]["columnLineage"]["fields"]["n"]["inputFields"][0]["transformations"]
    assert subtype == [{"type": "DIRECT", "subtype": "AGGREGATION"}]

    dropped = _complete(events, "icefloe.view-drop.lv.v")[0]
    assert dropped["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "DROP"
    assert "schema" not in dropped["outputs"][0]["facets"] and dropped["inputs"] == []

    register = by_operation["view-register"]
    assert register["outputs"][0]["name"] == "lv.again"
    assert register["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"

    sql_view = _complete(events, "icefloe.view-create.lv.sqlv")[0]
    assert sql_view["job"]["facets"]["sql"]["query"] == "CREATE VIEW lv.sqlv AS SELECT name FROM lv.base"
    assert [i["name"] for i in sql_view["inputs"]] == ["lv.base"]
    assert sql_view["outputs"][0]["facets"]["columnLineage"]["fields"]["name"]["inputFields"][0]["field"] == "name"
