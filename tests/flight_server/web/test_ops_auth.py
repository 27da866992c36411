"""The operator endpoints with ``--users``: the server's own credentials (Basic, or a Flight /
REST bearer token) are required everywhere but ``/healthz`` and ``/readyz``, on the metrics port
and on the REST port alike; a refusal is a 401 with a Basic challenge that names no secret."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pyarrow.flight as flight
import pytest

from tests.flight_server.security.security_support import PASSWORDS, write_users_file
from tests.flight_server.web.ops_support import ops_url
from tests.flight_server.web.rest_support import rest_url
from tests.servers import ServerProcess

PROTECTED = ["/metrics", "/", "/static/watch.js", "/static/watch-views.js", "/static/watch.css", "/api/tables",
             "/api/lineage?table=ns.t", "/api/events", "/api/commits", "/api/commits?table=ns.t&before=x",
             "/api/table?table=ns.t", "/api/summary"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("ops-auth")
    users = write_users_file(folder / "users.toml")
    users.chmod(0o600)
    proc = ServerProcess(folder / "wh", ["--users", str(users), "--metrics-port", "0", "--rest-port", "0"]).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    if url.endswith("/api/events"):  # a stream: read only its status and headers
        with httpx.stream("GET", url, headers=headers, timeout=10) as response:
            return response
    return httpx.get(url, headers=headers, timeout=10)


def test_probes_stay_open(server: ServerProcess) -> None:
    for base in (ops_url(server), rest_url(server)):
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        ready = httpx.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["status"] == "ready"


BAD = [_basic("rita", "wrong-password"), _basic("mallory", "x"), {"authorization": "Bearer not-a-token"},
       {"authorization": "Digest abc"}, {"authorization": "Basic %%%"}]


@pytest.mark.parametrize("path", PROTECTED)
def test_no_or_bad_credentials_are_refused(server: ServerProcess, path: str) -> None:
    for base in (ops_url(server), rest_url(server)):
        # Every kind of bad login on /metrics; no login and a wrong password everywhere.
        for headers in ([None, *BAD] if path == "/metrics" else [None, BAD[0]]):
            response = _get(base + path, headers)
            assert response.status_code == 401, (path, headers, response.status_code)
            assert response.headers["www-authenticate"].startswith("Basic realm=")
            if not path.endswith("/api/events"):
                assert set(response.json()) == {"error"}
                assert all(p not in response.text for p in PASSWORDS.values())


def test_credentials_of_any_role_open_every_endpoint(server: ServerProcess) -> None:
    client = flight.FlightClient(server.location)
    _, bearer = client.authenticate_basic_token("wendy", PASSWORDS["wendy"])
    client.close()
    logins = [_basic("rita", PASSWORDS["rita"]), _basic("alice", PASSWORDS["alice"]),
              {"authorization": bytes(bearer).decode()}]
    for base in (ops_url(server), rest_url(server)):
        for headers in logins:
            metrics = _get(f"{base}/metrics", headers)
            assert metrics.status_code == 200 and "icefloe_rpc_seconds" in metrics.text
            page = _get(f"{base}/", headers)
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert _get(f"{base}/api/tables", headers).json()["tables"] == []
            assert _get(f"{base}/api/lineage?table=ns.t", headers).status_code == 404  # checked, then looked up
            events = _get(f"{base}/api/events", headers)
            assert events.status_code == 200 and events.headers["content-type"].startswith("text/event-stream")
            history = _get(f"{base}/api/commits", headers)
            assert history.status_code == 200 and history.json()["commits"] == []
            assert _get(f"{base}/api/table?table=ns.t", headers).status_code == 404
            summary = _get(f"{base}/api/summary", headers)
            assert summary.status_code == 200 and summary.json()["ready"] is True
            # A bad request after a good login is still the request's 4xx.
            assert _get(f"{base}/api/tables?x=1", headers).status_code == 400
