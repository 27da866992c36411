"""/metrics moves as the server works (queries, appends, subscriptions, refused calls), bad
requests to the HTTP port get a 4xx, and `icefloe status` / `icefloe.health` report the server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import httpx
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from tests.doput_client import do_put
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.ops_support import ops_url, scrape, value
from tests.servers import ServerProcess, serving


@pytest.fixture(scope="module")
def ops_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("ops") / "wh", ["--metrics-port", "0", "--demo"]) as server:
        yield server


def _query(uri: str, sql: str) -> list[tuple[object, ...]]:
    with flightsql.connect(uri) as conn, conn.cursor() as cur:
        cur.execute(sql)
        rows: list[tuple[object, ...]] = cur.fetchall()
        return rows


def test_queries_count_rpcs_statements_and_streamed_rows(ops_server: ServerProcess) -> None:
    base = ops_url(ops_server)
    before = scrape(base)
    assert _query(ops_server.location, "SELECT name FROM demo.cities ORDER BY name LIMIT 3")
    with pytest.raises(Exception, match="syntax error|Parser Error"):
        _query(ops_server.location, "SELEC 1")
    after = scrape(base)
    assert value(after, "icefloe_stream_rows_total") - value(before, "icefloe_stream_rows_total") == 3
    assert value(after, "icefloe_stream_bytes_total") > value(before, "icefloe_stream_bytes_total")
    for name, labels in (
        ("icefloe_rpc_seconds_count", {"method": "do_get", "status": "OK"}),
        ("icefloe_rpc_seconds_count", {"method": "get_flight_info", "status": "OK"}),
        ("icefloe_statements_total", {"kind": "SELECT", "status": "OK"}),
        ("icefloe_statements_total", {"kind": "UNKNOWN", "status": "INVALID_ARGUMENT"}),
    ):
        assert value(after, name, **labels) >= value(before, name, **labels) + 1, (name, labels)
    # The bad SQL was refused (ADBC prepares it first: a DoAction) and counted with its status.
    refused = [labels for labels, v in after["icefloe_rpc_seconds_count"].items()
               if ("status", "INVALID_ARGUMENT") in labels and v > before["icefloe_rpc_seconds_count"].get(labels, 0)]
    assert refused, after["icefloe_rpc_seconds_count"]
    # Levels read at scrape time: nothing runs now, the head is where the demo left it.
    assert value(after, "icefloe_queries_running") == 0
    assert value(after, "icefloe_queries_queued") == 0
    assert value(after, "icefloe_catalog_commit_seq") >= 4
    assert value(after, "icefloe_rocksdb_size_bytes") > 0
    assert value(after, "icefloe_ready") == 1
    assert value(after, "icefloe_build_info", version="0.1.0") == 1


def test_appends_and_subscriptions_move_their_metrics(ops_server: ServerProcess) -> None:
    base = ops_url(ops_server)
    before = scrape(base)
    feed = FeedReader(ops_server.location, {"feed": "commits.v1", "after": "latest", "heartbeat_ms": 200})
    try:
        feed.wait_for("hello")
        deadline = time.monotonic() + 10
        while sum(value(scrape(base), "icefloe_feed_subscribers", path=path) for path in ("live", "log")) < 1:
            assert time.monotonic() < deadline, "the subscription never showed in icefloe_feed_subscribers"
            time.sleep(0.05)
        rows = city_rows(2)
        answer = do_put(ops_server.location, ("demo", "cities"), rows)
        feed.events(1)
        with pytest.raises(pa.ArrowKeyError, match="does not exist"):  # NOT_FOUND
            do_put(ops_server.location, ("demo", "no_such_table"), rows)
        after = scrape(base)
    finally:
        feed.close()
    assert value(after, "icefloe_append_rows_total") - value(before, "icefloe_append_rows_total") == 2
    assert value(after, "icefloe_append_bytes_total") > value(before, "icefloe_append_bytes_total")
    assert value(after, "icefloe_append_requests_total", status="OK") == value(
        before, "icefloe_append_requests_total", status="OK") + 1
    assert value(after, "icefloe_append_requests_total", status="NOT_FOUND") >= 1
    assert value(after, "icefloe_append_commit_seconds_count") > value(before, "icefloe_append_commit_seconds_count")
    assert value(after, "icefloe_commits_total", operation="append") > value(
        before, "icefloe_commits_total", operation="append")
    assert value(after, "icefloe_append_group_size_count") > value(before, "icefloe_append_group_size_count")
    assert value(after, "icefloe_catalog_commit_seq") == answer["commit_seq"]
    assert value(after, "icefloe_feed_delivery_lag_seconds_count") > value(
        before, "icefloe_feed_delivery_lag_seconds_count")
    assert value(after, "icefloe_rpc_seconds_count", method="do_exchange", status="OK") >= value(
        before, "icefloe_rpc_seconds_count", method="do_exchange", status="OK")
    # The subscription is gone once its stream ended.
    deadline = time.monotonic() + 10
    while True:
        now = scrape(base)
        if sum(value(now, "icefloe_feed_subscribers", path=path) for path in ("live", "log")) == 0:
            break
        assert time.monotonic() < deadline, "the closed subscription is still counted"
        time.sleep(0.05)


CITIES = pa.schema([pa.field("city_id", pa.int32(), nullable=False), ("name", pa.string()),
                    ("country", pa.string()), ("population", pa.int64()), ("latitude", pa.float64())])


def city_rows(n: int, first_id: int = 1000) -> pa.Table:
    """``n`` new rows for demo.cities."""
    return pa.table({"city_id": list(range(first_id, first_id + n)), "name": [f"c{i}" for i in range(n)],
                     "country": ["XX"] * n, "population": list(range(n)), "latitude": [1.5] * n}, schema=CITIES)


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/no/such/page", 404),
    ("POST", "/metrics", 405),
    ("DELETE", "/api/tables", 405),
    ("PUT", "/", 405),
    ("GET", "/api/lineage", 400),
    ("GET", "/api/lineage?table=", 400),
    ("GET", "/api/lineage?table=..%2F..%2Fetc%2Fpasswd", 400),
    ("GET", "/api/lineage?table=%00.t", 400),
    ("GET", "/api/lineage?table=demo." + "x" * 2000, 400),
    ("GET", "/api/lineage?table=demo.cities&table=demo.cities", 400),
    ("GET", "/api/lineage?table=demo.cities&sql=drop", 400),
    ("GET", "/api/lineage?table=demo.no_such_table", 404),
    ("GET", "/metrics?x=1", 400),
    ("GET", "/api/events?after=1", 400),
    ("GET", "/static/../../pyproject.toml", 404),
])
def test_bad_requests_get_a_4xx(ops_server: ServerProcess, method: str, path: str, status: int) -> None:
    base = ops_url(ops_server)
    head = value(scrape(base), "icefloe_catalog_commit_seq")
    response = httpx.request(method, f"{base}{path}", timeout=10)
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text and "/tmp" not in response.text
    assert value(scrape(base), "icefloe_catalog_commit_seq") == head
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200


def test_malformed_http_gets_a_4xx(ops_server: ServerProcess) -> None:
    base = ops_url(ops_server)
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GARBAGE \x00\x01 NOT HTTP\r\n\r\n")
        answer = sock.recv(1024)
    assert answer.startswith(b"HTTP/1.1 4"), answer
    assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200


def test_health_and_the_page_are_served(ops_server: ServerProcess) -> None:
    base = ops_url(ops_server)
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "alive"}
    ready = httpx.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"catalog": "open", "lineage_worker": "off"}
    page = httpx.get(f"{base}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/watch.js" in page.text and "http" not in page.text.split("<body>")[0].replace("http-equiv", "")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    tables = httpx.get(f"{base}/api/tables", timeout=10).json()
    names = {t["name"] for t in tables["tables"]}
    assert {"demo.cities", "demo.floe_sightings"} <= names
    assert all("metadata_location" not in json.dumps(t) for t in tables["tables"])
    client = flight.FlightClient(ops_server.location)
    try:
        health = json.loads(next(iter(client.do_action(flight.Action("icefloe.health", b"")))).body.to_pybytes())
        assert health["ready"] is True and health["checks"]["catalog"] == "open"
        with pytest.raises(pa.ArrowInvalid, match="takes no body"):  # INVALID_ARGUMENT
            list(client.do_action(flight.Action("icefloe.health", b"garbage")))
        listed = {a.type for a in client.list_actions()}
        assert {"icefloe.health", "icefloe.status"} <= listed
    finally:
        client.close()


def test_icefloe_status_prints_the_server(ops_server: ServerProcess) -> None:
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-m", "flight_server.cli", "status", "--uri", ops_server.location],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("icefloe 0.1.0  up ")
    for expected in ("ready:        yes", "commit head:  ", "subscribers:  ", "lineage:      ", "demo.cities",
                     "demo.floe_sightings"):
        assert expected in out, out
    as_json = subprocess.run([sys.executable, "-m", "flight_server.cli", "status", "--json", "--uri",
                              ops_server.location], capture_output=True, text=True, timeout=60, cwd=root)
    body = json.loads(as_json.stdout)
    assert body["commit_head"] >= 4 and body["version"] == "0.1.0"
    assert {"live", "log"} == set(body["feed_subscribers"])
    assert "outbox_depth" in body["lineage"]
    down = subprocess.run([sys.executable, "-m", "flight_server.cli", "status", "--uri", "grpc://127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert down.returncode != 0 and "cannot reach the server" in down.stderr and "Traceback" not in down.stderr


def test_icefloe_status_needs_admin(tmp_path: Path) -> None:
    from tests.flight_server.security.security_support import PASSWORDS, write_users_file

    users = write_users_file(tmp_path / "users.toml")
    root = Path(__file__).resolve().parents[3]
    with serving(tmp_path / "wh", ["--users", str(users)]) as server:
        def status(user: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "flight_server.cli", "status", "--uri", server.location,
                                   "--user", user], input=PASSWORDS[user] + "\n", capture_output=True, text=True,
                                  timeout=60, cwd=root)

        refused = status("rita")
        assert refused.returncode != 0 and "needs role admin" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        allowed = status("alice")
        assert allowed.returncode == 0 and "commit head:" in allowed.stdout, allowed.stderr
        client = flight.FlightClient(server.location)
        try:
            with pytest.raises(flight.FlightUnauthenticatedError):
                list(client.do_action(flight.Action("icefloe.health", b"")))
        finally:
            client.close()


def test_the_rest_port_serves_the_operator_endpoints_too(tmp_path: Path) -> None:
    import re

    with serving(tmp_path / "wh", ["--rest-port", "0"]) as server:
        found = re.search(r"icefloe REST catalog on (http://\S+)", server.log)
        assert found, server.log
        base = found.group(1)
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
        assert value(scrape(base), "icefloe_ready") == 1
        assert httpx.get(f"{base}/v1/config", timeout=10).status_code == 200  # the REST catalog still first
