"""Roles are the same on every port: every REST route (enumerated from the router), every
Flight action (from ListActions and the dispatcher), every Flight SQL command family and SQL
statement kind is called by a read, a write and an admin user of one real server (Flight and
REST ports), and who gets past authorization must be exactly what ``flight_server.security.roles``
says. A route, action or table entry added without the other side fails here.

The probes are built to fail harmlessly *after* authorization (a missing table, an empty
body) wherever they could change something, so "allowed" means "not 403 / not
PERMISSION_DENIED", and nothing but the content checks below commits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import httpx
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from security_helpers import _drain_put, _exchange, any_command, outcome
from security_support import PASSWORDS, ROLES
from servers import ServerProcess

from catalog import RocksCatalog
from flight_server.engine.sql_text import DEFAULT_SCHEMA
from flight_server.flightsql import dispatcher
from flight_server.http.rest.auth import RestAuth
from flight_server.http.rest.routes import RestCatalogApp
from flight_server.security import roles
from flight_server.security.auth import METHOD_FLOOR
from flight_server.security.users import ROLES as ROLE_NAMES
from tests.flight_server.web.rest_support import rest_url

SCHEMA = pa.schema([pa.field("x", pa.int64())])
USERS = sorted(ROLES, key=lambda user: ROLE_NAMES.index(ROLES[user]))  # rita (read), wendy, alice
Probe = Callable[[ServerProcess, str], str]  # -> "denied" or "allowed"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, users_file: Path) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("roles") / "warehouse"
    catalog = RocksCatalog("setup", warehouse=str(warehouse))
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=SCHEMA)
    catalog.close()
    proc = ServerProcess(warehouse, ["--users", str(users_file), "--rest-port", "0"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def _allowed(user: str, needed: str) -> bool:
    return roles.allows(ROLES[user], needed)


# -- REST ------------------------------------------------------------------------------------


def _router_routes(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    catalog = RocksCatalog("routes", warehouse=str(folder / "wh"))
    try:
        return [(e.method, e.pattern) for e in RestCatalogApp(catalog, RestAuth(None, 60.0)).endpoints]
    finally:
        catalog.close()


_tokens: dict[tuple[str, str], str] = {}


def _token(server: ServerProcess, user: str) -> str:
    key = (server.location, user)
    if key not in _tokens:
        answer = httpx.post(f"{rest_url(server)}/v1/oauth/tokens", timeout=30, data={
            "grant_type": "client_credentials", "client_id": user, "client_secret": PASSWORDS[user]})
        assert answer.status_code == 200, answer.text
        _tokens[key] = answer.json()["access_token"]
    return _tokens[key]


def _rest(server: ServerProcess, user: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{rest_url(server)}{path}", json=body, timeout=30,
                         headers={"authorization": f"Bearer {_token(server, user)}"})


def _rest_outcome(answer: httpx.Response) -> str:
    assert answer.status_code < 500 and answer.status_code != 401, answer.text
    if answer.status_code == 403:
        if answer.request.method != "HEAD":
            assert answer.json()["error"]["type"] == "ForbiddenException"
            assert "needs role" in answer.json()["error"]["message"]
        return "denied"
    return "allowed"


# Harmless requests per route: on a missing namespace / table, or a body refused after auth.
REST_PROBES: dict[tuple[str, tuple[str, ...]], tuple[str, Any]] = {
    ("GET", ("config",)): ("/v1/config", None),
    ("GET", ("namespaces",)): ("/v1/namespaces", None),
    ("POST", ("namespaces",)): ("/v1/namespaces", {"namespace": "not-a-list"}),
    ("GET", ("namespaces", "{namespace}")): ("/v1/namespaces/nope", None),
    ("HEAD", ("namespaces", "{namespace}")): ("/v1/namespaces/nope", None),
    ("DELETE", ("namespaces", "{namespace}")): ("/v1/namespaces/nope", None),
    ("POST", ("namespaces", "{namespace}", "properties")): ("/v1/namespaces/nope/properties", {"updates": {}}),
    ("GET", ("namespaces", "{namespace}", "tables")): ("/v1/namespaces/nope/tables", None),
    ("POST", ("namespaces", "{namespace}", "tables")): ("/v1/namespaces/nope/tables", {"name": 5}),
    ("POST", ("namespaces", "{namespace}", "register")): ("/v1/namespaces/nope/register", {"name": 5}),
    ("GET", ("namespaces", "{namespace}", "tables", "{table}")): ("/v1/namespaces/ns/tables/nope", None),
    ("HEAD", ("namespaces", "{namespace}", "tables", "{table}")): ("/v1/namespaces/ns/tables/nope", None),
    ("POST", ("namespaces", "{namespace}", "tables", "{table}")): ("/v1/namespaces/ns/tables/nope", {"updates": 5}),
    ("DELETE", ("namespaces", "{namespace}", "tables", "{table}")): ("/v1/namespaces/ns/tables/nope", None),
    ("POST", ("namespaces", "{namespace}", "tables", "{table}", "metrics")): (
        "/v1/namespaces/ns/tables/nope/metrics", {"report-type": "scan-report"}),
    ("POST", ("tables", "rename")): ("/v1/tables/rename", {"source": 5}),
    ("POST", ("transactions", "commit")): ("/v1/transactions/commit", {"table-changes": []}),
    ("GET", ("namespaces", "{namespace}", "views")): ("/v1/namespaces/nope/views", None),
    ("POST", ("namespaces", "{namespace}", "views")): ("/v1/namespaces/nope/views", {"name": 5}),
    ("GET", ("namespaces", "{namespace}", "views", "{view}")): ("/v1/namespaces/ns/views/nope", None),
    ("HEAD", ("namespaces", "{namespace}", "views", "{view}")): ("/v1/namespaces/ns/views/nope", None),
    ("POST", ("namespaces", "{namespace}", "views", "{view}")): ("/v1/namespaces/ns/views/nope", {"updates": []}),
    ("DELETE", ("namespaces", "{namespace}", "views", "{view}")): ("/v1/namespaces/ns/views/nope", None),
    ("POST", ("views", "rename")): ("/v1/views/rename", {"source": 5}),
    ("POST", ("namespaces", "{namespace}", "register-view")): ("/v1/namespaces/nope/register-view", {"name": 5}),
}


def test_every_rest_route_is_in_the_roles_table(tmp_path: Path) -> None:
    served = set(_router_routes(tmp_path))
    missing_or_stale = served ^ set(roles.REST_ROUTES)
    assert not missing_or_stale, f"routes without a roles entry (or stale entries): {missing_or_stale}"
    token_route = ("POST", ("oauth", "tokens"))
    assert served - {token_route} == set(REST_PROBES), "give every route a probe above"


def test_every_rest_route_answers_each_role_as_the_table_says(server: ServerProcess, tmp_path: Path) -> None:
    seen = []
    for method, pattern in _router_routes(tmp_path):
        needed = roles.rest_role(method, pattern)
        if pattern == ("oauth", "tokens"):  # the login: anyone with a password (the table says read)
            assert needed == roles.READ
            for user in USERS:
                assert _token(server, user)
            continue
        path, body = REST_PROBES[(method, pattern)]
        for user in USERS:
            got = _rest_outcome(_rest(server, user, method, path, body))
            seen.append((method, pattern, user, got))
            assert got == ("allowed" if _allowed(user, needed) else "denied"), (method, pattern, user, needed)
    assert {got for *_, got in seen} == {"allowed", "denied"}


# -- what a change contains: admin-only table properties, snapshot expiry ---------------------


def _props(server: ServerProcess) -> dict[str, str]:
    loaded = _rest(server, "alice", "GET", "/v1/namespaces/ns/tables/t")
    return dict(loaded.json()["metadata"]["properties"])


@pytest.mark.parametrize("key", ["icefloe.snapshots.retain", "icefloe.schema-policy", "icefloe.compaction.auto"])
def test_admin_properties_need_admin_on_every_rest_path(server: ServerProcess, key: str) -> None:
    value = {"icefloe.snapshots.retain": "7", "icefloe.schema-policy": "strict"}.get(key, "false")
    set_ = {"updates": [{"action": "set-properties", "updates": {key: value}}]}
    remove = {"updates": [{"action": "remove-properties", "removals": [key]}]}
    change = {"identifier": {"namespace": ["ns"], "name": "t"}, "requirements": [], **set_}
    schema = {"type": "struct", "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}
    for user in ("rita", "wendy"):
        for method, path, body in [
            ("POST", "/v1/namespaces/ns/tables/t", set_),
            ("POST", "/v1/transactions/commit", {"table-changes": [change]}),
            ("POST", "/v1/namespaces/ns/tables", {"name": "p", "schema": schema, "properties": {key: value}}),
            ("POST", "/v1/namespaces/ns/tables", {"name": "p", "schema": schema, "properties": {key: value},
                                                  "stage-create": True}),
        ]:
            answer = _rest(server, user, method, path, body)
            assert answer.status_code == 403, (user, path, answer.text)
            if user == "wendy":  # past the route's role: the property is named
                assert key in answer.json()["error"]["message"] and "needs role admin" in answer.text
    assert key not in _props(server)
    # a write user may still set ordinary properties, and re-send an admin one unchanged
    assert _rest(server, "wendy", "POST", "/v1/namespaces/ns/tables/t", {"updates": [
        {"action": "set-properties", "updates": {"owner": "wendy"}}]}).status_code == 200
    assert _rest(server, "alice", "POST", "/v1/namespaces/ns/tables/t", set_).status_code == 200
    assert _props(server)[key] == value
    unchanged = {"updates": [{"action": "set-properties", "updates": {key: value, "owner": "w2"}}]}
    assert _rest(server, "wendy", "POST", "/v1/namespaces/ns/tables/t", unchanged).status_code == 200
    assert _rest(server, "wendy", "POST", "/v1/namespaces/ns/tables/t", remove).status_code == 403
    assert _rest(server, "alice", "POST", "/v1/namespaces/ns/tables/t", remove).status_code == 200
    assert key not in _props(server)


def test_snapshot_expiry_over_rest_needs_admin_as_maintenance_does(server: ServerProcess) -> None:
    assert roles.COMMIT_UPDATES["remove-snapshots"] == roles.action_role("icefloe.maintain") == roles.ADMIN
    expire = {"updates": [{"action": "remove-snapshots", "snapshot-ids": [12345]}]}
    answer = _rest(server, "wendy", "POST", "/v1/namespaces/ns/tables/t", expire)
    assert answer.status_code == 403 and "remove-snapshots" in answer.json()["error"]["message"]
    assert _rest(server, "alice", "POST", "/v1/namespaces/ns/tables/t", expire).status_code != 403


def test_default_namespace_is_never_dropped(server: ServerProcess) -> None:
    assert roles.PROTECTED_NAMESPACES == {(DEFAULT_SCHEMA,)}
    answer = _rest(server, "alice", "DELETE", f"/v1/namespaces/{DEFAULT_SCHEMA}")
    assert answer.status_code == 400, answer.text
    assert "cannot be dropped" in answer.json()["error"]["message"]
    with _adbc(server, "alice") as conn, conn.cursor() as cur:
        for sql in ('DROP SCHEMA "default"', 'DROP SCHEMA "default" CASCADE'):
            with pytest.raises(Exception, match="cannot be dropped"):
                cur.execute(sql)
    assert _rest(server, "alice", "HEAD", f"/v1/namespaces/{DEFAULT_SCHEMA}").status_code == 204


# -- Flight -----------------------------------------------------------------------------------


def _options(server: ServerProcess, user: str) -> flight.FlightCallOptions:
    client = flight.FlightClient(server.location)
    try:
        header = client.authenticate_basic_token(user, PASSWORDS[user])
    finally:
        client.close()
    return flight.FlightCallOptions(headers=[header], timeout=30)


def _flight_outcome(call: Callable[[flight.FlightClient, flight.FlightCallOptions], Any],
                    server: ServerProcess, user: str) -> str:
    client = flight.FlightClient(server.location)
    try:
        kind, exc = outcome(lambda: call(client, _options(server, user)))
    finally:
        client.close()
    assert kind != "unauthenticated", exc
    assert exc is None or "Traceback" not in str(exc)
    return "denied" if kind == "permission_denied" else "allowed"


def _adbc(server: ServerProcess, user: str) -> Any:
    return flightsql.connect(server.location, db_kwargs={"username": user, "password": PASSWORDS[user]},
                             autocommit=True)


def _sql_outcome(sql: str) -> Probe:
    def probe(server: ServerProcess, user: str) -> str:
        with _adbc(server, user) as conn, conn.cursor() as cur:
            try:
                cur.execute(sql)
                cur.fetchall()
            except Exception as exc:  # noqa: BLE001 - refused after auth (missing table...) is "allowed"
                if "PermissionDenied" in str(exc) or "needs role" in str(exc):
                    return "denied"
                assert "Unauthenticated" not in str(exc), exc
        return "allowed"
    return probe


def _action_body(name: str) -> bytes:
    # Bodies that fail (or do nothing) after authorization.
    return {"icefloe.maintain": b'{"table": "ns.nope"}', "icefloe.commit-staged": b"{}",
            "icefloe.abort-staged": b"{}"}.get(name, b"")


def test_every_flight_action_is_in_the_roles_table(server: ServerProcess) -> None:
    listed = {action.type for action in _flight_list_actions(server)}
    unsupported = set(dispatcher._UNSUPPORTED_ACTIONS)
    assert listed | unsupported == set(roles.FLIGHT_ACTIONS), listed ^ set(roles.FLIGHT_ACTIONS)
    assert set(METHOD_FLOOR) == {m for name, m in flight.FlightMethod.__members__.items() if name != "INVALID"}
    assert {m.name: role for m, role in METHOD_FLOOR.items()} == dict(roles.FLIGHT_METHODS)


def _flight_list_actions(server: ServerProcess) -> list[flight.ActionType]:
    client = flight.FlightClient(server.location)
    try:
        return list(client.list_actions(_options(server, "rita")))
    finally:
        client.close()


def test_every_flight_action_answers_each_role_as_the_table_says(server: ServerProcess) -> None:
    names = {action.type for action in _flight_list_actions(server)} | set(dispatcher._UNSUPPORTED_ACTIONS)
    for name in sorted(names | {"icefloe.no-such-action"}):
        needed = roles.action_role(name)
        for user in USERS:
            got = _flight_outcome(
                lambda c, o, name=name: list(c.do_action(flight.Action(name, _action_body(name)), o)), server, user)
            assert got == ("allowed" if _allowed(user, needed) else "denied"), (name, user, needed)


def _statement_ingest() -> bytes:
    # CommandStatementIngest: table (field 2) "nope", schema (field 3) "ns"
    return any_command("CommandStatementIngest", b"\x12\x04nope" + b"\x1a\x02ns")


def _changes(c: flight.FlightClient, o: flight.FlightCallOptions) -> Any:
    descriptor = flight.FlightDescriptor.for_command(json.dumps({"changes": "ns.t", "after": 0, "until": 0}).encode())
    return c.get_flight_info(descriptor, o)


FLIGHT_COMMAND_PROBES: dict[str, Callable[[flight.FlightClient, flight.FlightCallOptions], Any]] = {
    "metadata": lambda c, o: c.get_flight_info(
        flight.FlightDescriptor.for_command(any_command("CommandGetCatalogs")), o),
    "statement-query": lambda c, o: c.get_flight_info(flight.FlightDescriptor.for_command(
        any_command("CommandStatementQuery", b"\x0a\x08SELECT 1")), o),
    "prepared-query-parameters": lambda c, o: _drain_put(
        c, flight.FlightDescriptor.for_command(any_command("CommandPreparedStatementQuery")), o),
    "statement-update": lambda c, o: _drain_put(
        c, flight.FlightDescriptor.for_command(any_command("CommandStatementUpdate")), o),
    "statement-ingest": lambda c, o: _drain_put(c, flight.FlightDescriptor.for_command(_statement_ingest()), o),
    "append": lambda c, o: _drain_put(c, flight.FlightDescriptor.for_path("ns", "nope"), o),
    "change-scan": _changes,
    "feed": _exchange,
    "ticket": lambda c, o: c.do_get(flight.Ticket(any_command("TicketStatementQuery", b"\x0a\x03bad")), o).read_all(),
}

SQL_PROBES: dict[str, Probe] = {
    "query": _sql_outcome("SELECT count(*) FROM ns.t"),
    "dml": _sql_outcome("INSERT INTO ns.nope VALUES (1)"),
    "ddl": _sql_outcome("DROP TABLE ns.nope"),
    "alter-table-properties": _sql_outcome("ALTER TABLE ns.nope SET ('icefloe.snapshots.retain' = '3')"),
    "icefloe.changes": _sql_outcome("SELECT * FROM icefloe.changes('ns.t', after => 0, until => 0)"),
    "icefloe.commit_staged": _sql_outcome("CALL icefloe.commit_staged('ns.nope', job => 'no-such-job')"),
    "icefloe.abort_staged": _sql_outcome("CALL icefloe.abort_staged('ns.nope', job => 'no-such-job')"),
}


def test_every_flight_command_family_answers_each_role_as_the_table_says(server: ServerProcess) -> None:
    assert set(FLIGHT_COMMAND_PROBES) == set(roles.FLIGHT_COMMANDS), "give every command family a probe"
    for family, call in FLIGHT_COMMAND_PROBES.items():
        needed = roles.FLIGHT_COMMANDS[family]
        for user in USERS:
            got = _flight_outcome(call, server, user)
            assert got == ("allowed" if _allowed(user, needed) else "denied"), (family, user, needed)


def test_every_sql_statement_kind_answers_each_role_as_the_table_says(server: ServerProcess) -> None:
    assert set(SQL_PROBES) == set(roles.SQL_STATEMENTS), "give every statement kind a probe"
    for kind, probe in SQL_PROBES.items():
        needed = roles.SQL_STATEMENTS[kind]
        for user in USERS:
            assert probe(server, user) == ("allowed" if _allowed(user, needed) else "denied"), (kind, user, needed)
