"""The HTTP side against a browser-borne attacker and a greedy user, with real clients.

- Cross-site writes: a form or ``fetch`` from ``http://evil.example`` (``text/plain`` body,
  foreign ``Origin``, ``Sec-Fetch-Site: cross-site``) created namespaces and renamed tables;
  now 403 / 415 and nothing is committed, while pyiceberg (JSON, no Origin) works as before.
- DNS rebinding: any ``Host`` was served; now only the server's own names (421 otherwise),
  on the REST and the metrics port.
- ``/api/events``: one user's streams could take every slot; now a per-user cap (429).
- REST token exchange: issued a token with a fresh login time (a login renewed forever);
  now the new token keeps the original login and ends at the 7-day session cap.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from flight_server.security.tokens import KEY_FILE_NAME, MAX_SESSION_S, TokenSigner
from flight_server.security.users import load_users
from tests.flight_server.security.security_support import PASSWORDS, write_users_file
from tests.flight_server.web.ops_support import ops_url
from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64())])
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("harden") / "wh", [
            "--metrics-port", "0", "--http-allowed-host", "catalog.example",
            "--advertise-uri", "grpc://fleet.example:31337"]) as proc:
        rest = RestCatalog("r", uri=rest_url(proc))
        rest.create_namespace("ns")
        rest.create_table("ns.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
        yield proc


def expect(answer: httpx.Response, status: int, kind: str, fragment: str = "") -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == kind and error["code"] == status, error
    assert fragment.lower() in error["message"].lower(), error


def port_of(base: str) -> int:
    port = httpx.URL(base).port
    assert port is not None
    return port


def test_cross_site_writes_are_refused_and_commit_nothing(server: ServerProcess) -> None:
    base = rest_url(server)
    before = head_seq(server.warehouse)
    create = json.dumps({"namespace": ["pwned"]})
    rename = json.dumps({"source": {"namespace": ["ns"], "name": "t"},
                         "destination": {"namespace": ["ns"], "name": "x"}})
    with httpx.Client(base_url=base, timeout=10) as client:
        # What a cross-site <form> or no-cors fetch can send.
        for path, body in (("/v1/namespaces", create), ("/v1/tables/rename", rename)):
            expect(client.post(path, content=body, headers={"content-type": "text/plain", "origin": EVIL}),
                   403, "ForbiddenException", "another origin")
            expect(client.post(path, content=body, headers={"content-type": "text/plain"}),
                   415, "UnsupportedMediaTypeException", "application/json")
            expect(client.post(path, content=body, headers={"content-type": "application/x-www-form-urlencoded"}),
                   415, "UnsupportedMediaTypeException")
            expect(client.post(path, content=body, headers={"content-type": "multipart/form-data; boundary=x"}),
                   415, "UnsupportedMediaTypeException")
            expect(client.post(path, content=body), 415, "UnsupportedMediaTypeException", "no Content-Type")
            # Even JSON (after a CORS preflight this server never answers) from another site.
            for headers in ({"origin": EVIL}, {"origin": "null"}, {"sec-fetch-site": "cross-site"},
                            {"sec-fetch-site": "same-site"}, {"origin": f"{base}.evil.example"},
                            {"origin": "https://catalog.example.evil.example"}):
                expect(client.post(path, content=body, headers={"content-type": "application/json", **headers}),
                       403, "ForbiddenException")
        expect(client.delete("/v1/namespaces/ns/tables/t", headers={"origin": EVIL}), 403, "ForbiddenException")
        expect(client.delete("/v1/namespaces/ns/tables/t", headers={"sec-fetch-site": "cross-site"}),
               403, "ForbiddenException")
        expect(client.request("DELETE", "/v1/namespaces/ns/tables/t", content=b"{}",
                              headers={"content-type": "text/plain"}), 415, "UnsupportedMediaTypeException")
        expect(client.request("PUT", "/v1/namespaces", content=b"{}", headers={"origin": EVIL}),
               405, "MethodNotAllowedException")  # no endpoint takes it: routing answers
        # The token endpoint takes a form, but not from another site.
        token = client.post("/v1/oauth/tokens", data={"grant_type": "client_credentials"}, headers={"origin": EVIL})
        expect(token, 403, "ForbiddenException")
        expect(client.post("/v1/oauth/tokens", content=b"grant_type=client_credentials",
                           headers={"content-type": "text/plain"}), 415, "UnsupportedMediaTypeException")
        # The ops app (on the REST port too): nothing to change there, and GETs go on.
        assert client.post("/api/tables", headers={"origin": EVIL}).status_code == 405
        assert client.get("/api/tables", headers={"origin": EVIL, "sec-fetch-site": "cross-site"}).status_code == 200
    assert head_seq(server.warehouse) == before, "a refused request committed something"
    rest = RestCatalog("r", uri=base)
    assert ("pwned",) not in rest.list_namespaces()
    assert rest.list_tables("ns") == [("ns", "t")]


def test_own_origin_json_and_plain_clients_still_work(server: ServerProcess) -> None:
    base = rest_url(server)
    port = port_of(base)
    with httpx.Client(base_url=base, timeout=10) as client:
        # The page's own origin (what a same-origin fetch sends), with a charset parameter.
        for i, origin in enumerate((f"http://127.0.0.1:{port}", f"http://localhost:{port}",
                                    "https://catalog.example", "http://catalog.example:8080")):
            answer = client.post("/v1/namespaces", json={"namespace": [f"own{i}"]},
                                 headers={"origin": origin, "sec-fetch-site": "same-origin",
                                          "content-type": "application/json; charset=utf-8"})
            assert answer.status_code == 200, (origin, answer.text)
        # A DELETE has no body and needs no Content-Type.
        assert client.delete("/v1/namespaces/own0").status_code == 204
        assert client.delete("/v1/namespaces/own1", headers={"origin": f"http://127.0.0.1:{port}"}).status_code == 204
    # The stock pyiceberg client (JSON, no Origin): create, append, rename, drop.
    rest = RestCatalog("r", uri=base)
    rest.create_namespace("py")
    table = rest.create_table("py.t", SCHEMA)
    table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    rest.rename_table("py.t", "py.u")
    assert rest.load_table("py.u").scan().to_arrow().num_rows == 2
    rest.drop_table("py.u")
    rest.drop_namespace("py")


def raw_status(base: str, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port_of(base)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_only_the_servers_own_host_names_are_answered(server: ServerProcess) -> None:
    for base, path in ((rest_url(server), "/v1/config"), (ops_url(server), "/healthz"), (ops_url(server), "/metrics"),
                       (rest_url(server), "/healthz")):
        port = port_of(base)
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", f"localhost:{port + 1}",
                     f"127.0.0.2:{port}", f"fleet.example:{port + 1}", "catalog.example.evil.example",
                     f"[::1]:{port}", "bad host", f"127.0.0.1:{port}:1", "x" * 300):
            answer = httpx.get(f"{base}{path}", headers={"host": host}, timeout=10)
            expect(answer, 421, "MisdirectedRequestException", "--http-allowed-host")
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", f"fleet.example:{port}",
                     "catalog.example", "catalog.example:1234"):
            answer = httpx.get(f"{base}{path}", headers={"host": host}, timeout=10)
            assert answer.status_code == 200, (host, answer.text)
        # No Host at all (HTTP/1.0), or two: 400.
        assert raw_status(base, f"GET {path} HTTP/1.0\r\n\r\n".encode()) == 400
        assert raw_status(base, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\n\r\n"
                                .encode()) == 400
    # A rebound name cannot write either (the Host check comes first).
    answer = httpx.post(f"{rest_url(server)}/v1/namespaces", json={"namespace": ["rebound"]},
                        headers={"host": "evil.example"}, timeout=10)
    assert answer.status_code == 421
    assert server.proc is not None and server.proc.poll() is None


def test_allowed_hosts_from_the_environment_and_a_wildcard_bind(tmp_path: Path) -> None:
    env = {"ICEFLOE_HTTP_ALLOWED_HOSTS": "one.example, two.example:9999,*.corp.example"}
    with rest_server(tmp_path / "wh", ["--host", "0.0.0.0", "--allow-remote-without-auth"]) as proc:
        port = port_of(rest_url(proc))
        base = f"http://127.0.0.1:{port}"
        for host in (socket.gethostname(), "127.0.0.1", "0.0.0.0", "localhost"):
            answer = httpx.get(f"{base}/v1/config", headers={"host": f"{host}:{port}"}, timeout=10)
            assert answer.status_code == 200, (host, answer.text)
        assert httpx.get(f"{base}/v1/config", headers={"host": f"evil.example:{port}"}, timeout=10).status_code == 421
    proc = ServerProcess(tmp_path / "wh2", ["--rest-port", "0"], env=env).start()
    try:
        base = rest_url(proc)
        for host, status in (("one.example", 200), ("one.example:80", 200), ("two.example:9999", 200),
                             ("two.example", 421), ("a.corp.example", 200), ("corp.example.evil", 421)):
            assert httpx.get(f"{base}/v1/config", headers={"host": host}, timeout=10).status_code == status, host
    finally:
        proc.stop()
    bad = ServerProcess(tmp_path / "wh3", ["--rest-port", "0", "--http-allowed-host", "bad host!"])
    with pytest.raises(RuntimeError, match="is not a host name"):
        bad.start(timeout=30)


def basic(user: str) -> dict[str, str]:
    value = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"authorization": f"Basic {value}"}


@pytest.fixture(scope="module")
def users_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("users")
    users = write_users_file(folder / "users.toml")
    users.chmod(0o600)
    with rest_server(folder / "wh", ["--users", str(users), "--http-max-event-streams-per-user", "2",
                                     "--http-max-event-streams", "3"]) as proc:
        yield proc


def test_event_streams_are_capped_per_user(users_server: ServerProcess) -> None:
    url = f"{rest_url(users_server)}/api/events"
    with ExitStack() as stack:
        client = stack.enter_context(httpx.Client(timeout=10))
        readers: list[Iterator[str]] = []  # dropping a line iterator would close its stream

        def open_stream(user: str) -> httpx.Response:
            response = stack.enter_context(client.stream("GET", url, headers=basic(user)))
            if response.status_code == 200:
                readers.append(response.iter_lines())
                assert next(readers[-1]).startswith("retry:")
            else:
                response.read()
            return response

        assert [open_stream("wendy").status_code for _ in range(2)] == [200, 200]
        third = open_stream("wendy")
        assert third.status_code == 429 and "per user" in third.json()["error"]
        assert open_stream("rita").status_code == 200  # another user still gets one ...
        full = open_stream("rita")  # ... until the total is reached (3)
        assert full.status_code == 503 and "retry later" in full.json()["error"]
        assert open_stream("alice").status_code == 200  # an admin still can
    # Closed streams give their slots back.
    deadline = time.monotonic() + 10
    while True:
        with httpx.Client(timeout=10) as client, client.stream("GET", url, headers=basic("wendy")) as again:
            if again.status_code == 200:
                break
        assert time.monotonic() < deadline, "closed streams were not given back"
        time.sleep(0.2)


def test_event_streams_without_users_are_capped_per_client_address(tmp_path: Path) -> None:
    with rest_server(tmp_path / "wh", ["--http-max-event-streams-per-user", "1"]) as proc:
        port = port_of(rest_url(proc))
        with ExitStack() as stack:
            statuses = []
            for source in ("127.0.0.1", "127.0.0.1", "127.0.0.2"):
                transport = httpx.HTTPTransport(local_address=source)
                client = stack.enter_context(httpx.Client(transport=transport, timeout=10))
                response = stack.enter_context(client.stream("GET", f"http://127.0.0.1:{port}/api/events"))
                statuses.append(response.status_code)
                if response.status_code != 200:
                    response.read()
            assert statuses == [200, 429, 200]


def oauth(base: str, **form: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/oauth/tokens", data=form, timeout=10)


def claims_of(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    payload: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return payload


EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"


def test_token_exchange_keeps_the_login_time_and_the_session_cap(users_server: ServerProcess) -> None:
    base = rest_url(users_server)
    login = oauth(base, grant_type="client_credentials", client_id="wendy", client_secret=PASSWORDS["wendy"])
    assert login.status_code == 200
    first = login.json()["access_token"]
    time.sleep(1.1)
    renewed = oauth(base, grant_type=EXCHANGE, subject_token=first, subject_token_type=ACCESS)
    assert renewed.status_code == 200, renewed.text
    old, new = claims_of(first), claims_of(renewed.json()["access_token"])
    assert new["at"] == old["at"] and new["sid"] == old["sid"] and new["exp"] > old["exp"]

    # A token whose login is almost 7 days old, signed with the server's key (as a client
    # that kept renewing would hold): the exchange ends at the cap, not 8 hours later.
    key = bytes.fromhex((users_server.warehouse / KEY_FILE_NAME).read_text().split()[0])
    users = load_users(str(users_server.warehouse.parent / "users.toml"))
    signer = TokenSigner(key, 8 * 3600.0)
    now = time.time()
    login_at = int(now) - MAX_SESSION_S + 60
    aged = signer.issue("wendy", users["wendy"].password_hash, now=now - 3600, login_at=login_at, login_id="s1")
    answer = oauth(base, grant_type=EXCHANGE, subject_token=aged, subject_token_type=ACCESS)
    assert answer.status_code == 200, answer.text
    renewed_claims = claims_of(answer.json()["access_token"])
    assert renewed_claims["at"] == login_at and renewed_claims["sid"] == "s1"
    assert renewed_claims["exp"] == login_at + MAX_SESSION_S
    assert 0 < answer.json()["expires_in"] <= 60
    # Exchanging that one again gets no further.
    again = oauth(base, grant_type=EXCHANGE, subject_token=answer.json()["access_token"], subject_token_type=ACCESS)
    assert again.status_code == 200 and claims_of(again.json()["access_token"])["exp"] == login_at + MAX_SESSION_S
    # A still-valid token whose login is past the cap is refused: log in again.
    stale = signer.issue("wendy", users["wendy"].password_hash, now=now, login_at=int(now) - MAX_SESSION_S - 5)
    refused = oauth(base, grant_type=EXCHANGE, subject_token=stale, subject_token_type=ACCESS)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    assert "log in again" in refused.json()["error_description"]
    # The capped token works on the Flight port too and is not renewed past the cap there.
    import pyarrow.flight as flight

    seen: list[str] = []

    class Capture(flight.ClientMiddlewareFactory):  # type: ignore[misc]
        def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
            class M(flight.ClientMiddleware):  # type: ignore[misc]
                def received_headers(self, headers: dict[str, list[str]]) -> None:
                    seen.extend(headers.get("authorization", []))
            return M()

    client = flight.FlightClient(users_server.location, middleware=[Capture()])
    try:
        capped = answer.json()["access_token"]
        options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {capped}".encode())])
        assert list(client.list_actions(options))
        for value in seen:
            assert claims_of(value.removeprefix("Bearer "))["exp"] <= login_at + MAX_SESSION_S
    finally:
        client.close()
    # Missing subject token: a precise 400.
    missing = oauth(base, grant_type=EXCHANGE)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"


def test_cross_site_write_with_a_browsers_saved_login_is_refused(users_server: ServerProcess) -> None:
    base = rest_url(users_server)
    before = head_seq(users_server.warehouse)
    answer = httpx.post(f"{base}/v1/namespaces", content=b'{"namespace": ["pwned"]}', timeout=10,
                        headers={**basic("alice"), "content-type": "text/plain", "origin": EVIL,
                                 "sec-fetch-site": "cross-site"})
    expect(answer, 403, "ForbiddenException")
    assert head_seq(users_server.warehouse) == before
    ok = httpx.post(f"{base}/v1/namespaces", json={"namespace": ["legit"]}, headers=basic("alice"), timeout=10)
    assert ok.status_code == 200, ok.text
