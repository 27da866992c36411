"""The watch page's JSON endpoints over HTTP (httpx against a real server): /api/commits pages
the commit log exactly and with bounded work, filters by table and operation, and answers every
bad parameter with a precise 4xx (never a 5xx); /api/table and /api/summary say what the page
shows. Commits are made through Flight (DoPut, SQL DELETE, the icefloe.maintain action)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import httpx
import pyarrow.flight as flight
import pytest

from tests.doput_client import do_put
from tests.flight_server.web.ops_support import ops_url
from tests.flight_server.web.test_ops_metrics import city_rows
from tests.servers import ServerProcess, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("history") / "wh", ["--metrics-port", "0", "--demo"]) as proc:
        for i in range(6):
            do_put(proc.location, ("demo", "cities"), city_rows(1, first_id=500 + i))
        with flightsql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM demo.floe_sightings WHERE city_id IN (3, 5)")
        client = flight.FlightClient(proc.location)
        body = json.dumps({"table": "demo.cities", "orphan_grace_s": 3600}).encode()
        list(client.do_action(flight.Action("icefloe.maintain", body)))
        client.close()
        yield proc
        assert "Traceback" not in proc.log, proc.log


def _get(server: ServerProcess, path: str) -> httpx.Response:
    return httpx.get(ops_url(server) + path, timeout=10)


def _json(server: ServerProcess, path: str) -> Any:
    response = _get(server, path)
    assert response.status_code == 200, (path, response.text)
    return response.json()


def test_paging_walks_the_whole_log_newest_first(server: ServerProcess) -> None:
    first = _json(server, "/api/commits?limit=3")
    head = first["head"]
    assert [c["seq"] for c in first["commits"]] == [head, head - 1, head - 2]
    # Unfiltered, a page reads only what it shows.
    assert first["scanned"] == 3 and first["next_before"] == head - 2
    seen = [c["seq"] for c in first["commits"]]
    before = first["next_before"]
    while before is not None:
        page = _json(server, f"/api/commits?limit=3&before={before}")
        assert all(c["seq"] < before for c in page["commits"])
        seen += [c["seq"] for c in page["commits"]]
        before = page["next_before"]
    assert seen == list(range(head, 0, -1))
    # A "before" past the head is the head; "before=1" is the empty page at the log's start.
    assert _json(server, f"/api/commits?limit=1&before={head + 1000}")["commits"][0]["seq"] == head
    assert _json(server, "/api/commits?before=1") == {**_json(server, "/api/commits?before=1"), "commits": [],
                                                        "next_before": None}


def test_filters_and_what_each_commit_says(server: ServerProcess) -> None:
    cities = _json(server, "/api/commits?table=demo.cities&limit=500")["commits"]
    assert cities and {c["table_name"] for c in cities} == {"demo.cities"}
    appends = _json(server, "/api/commits?table=demo.cities&operation=append")["commits"]
    assert len(appends) == 7  # the demo's own and 6 DoPuts
    assert all(c["added_rows"] >= 1 and c["net_rows"] == c["added_rows"] and not c["maintenance"] for c in appends)
    (delete,) = _json(server, "/api/commits?operation=delete")["commits"]
    assert delete["table_name"] == "demo.floe_sightings" and delete["net_rows"] == -120
    assert not delete["maintenance"]
    maintenance = _json(server, "/api/commits?operation=maintenance")["commits"]
    assert maintenance and all(c["maintenance"] for c in maintenance)
    assert {c["maintenance_kind"] for c in maintenance if c["operation"] == "replace"} >= {"compact"}
    # Nothing that names a server path or a statement's text.
    for commit in cities + [delete]:
        assert not {"metadata_location", "extra", "sql"} & set(commit), commit
        assert commit["snapshot_id"] is None or isinstance(commit["snapshot_id"], str)  # 63-bit: text for JS


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/api/commits?before=abc", 400, "before must be a whole number"),
    ("/api/commits?before=-1", 400, "before must be a whole number"),
    ("/api/commits?before=0", 400, "before must be from 1"),
    ("/api/commits?before=99999999999999999999999", 400, "before must be a whole number"),
    ("/api/commits?before=1.5", 400, "before must be a whole number"),
    ("/api/commits?limit=0", 400, "limit must be from 1 to 500"),
    ("/api/commits?limit=501", 400, "limit must be from 1 to 500"),
    ("/api/commits?limit=1000000000000", 400, "limit must be from 1 to 500"),
    ("/api/commits?limit=", 400, "limit must be a whole number"),
    ("/api/commits?table=", 400, "give ?table=namespace.table"),
    ("/api/commits?table=nodot", 400, "not a table name"),
    ("/api/commits?table=" + "a." * 600 + "t", 400, "table name too long"),
    ("/api/commits?table=demo.no_such", 404, "table demo.no_such does not exist"),
    ("/api/commits?operation=DROP%20TABLE", 400, "operation must be an operation name"),
    ("/api/commits?operation=" + "a" * 100, 400, "operation must be an operation name"),
    ("/api/commits?limit=1&limit=2", 400, "given more than once"),
    ("/api/commits?seq=1", 400, "unknown query parameter 'seq'"),
    ("/api/table", 400, "give ?table=namespace.table"),
    ("/api/table?table=demo.no_such", 404, "table demo.no_such does not exist"),
    ("/api/table?table=..", 400, "not a table name"),
    ("/api/summary?x=1", 400, "unknown query parameter"),
    ("/?page_size=1&x=2", 400, "unknown query parameter"),
])
def test_bad_parameters_get_a_precise_4xx(server: ServerProcess, path: str, status: int, message: str) -> None:
    response = _get(server, path)
    assert response.status_code == status, (path, response.status_code, response.text)
    assert message in response.json()["error"], response.text


def test_a_tables_page_and_the_summary(server: ServerProcess) -> None:
    table = _json(server, "/api/table?table=demo.cities")
    assert table["rows"] == 14 and table["data_files"] == 1 and table["bytes"] > 0
    assert table["snapshot_count"] == len(table["snapshots"]) >= 2
    assert [f["name"] for f in table["schema"]["fields"]] == ["city_id", "name", "country", "population", "latitude"]
    assert table["last_maintenance"]["operation"] == "replace"
    assert table["last_commit"]["seq"] == _json(server, "/api/commits?table=demo.cities&limit=1")["commits"][0]["seq"]
    assert "location" not in table and all("path" not in k for k in table["properties"])
    summary = _json(server, "/api/summary")
    assert summary["ready"] is True and summary["head"] == _json(server, "/api/commits?limit=1")["head"]
    assert summary["queries"] == {"running": 0, "queued": 0}
    assert summary["feed_subscribers"] == {"live": 0, "log": 0}
    assert summary["series"], summary
    point = summary["series"][-1]
    assert set(point) == {"t", "commits_per_s", "rows_per_s", "feed_lag_ms", "query_ms"}
