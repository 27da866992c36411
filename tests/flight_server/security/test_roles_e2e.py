"""Roles on the real services: what each role may do, that refused calls commit nothing, and
that the principal is recorded on commits (in the commit log, and in feed events).

Runs once the Flight SQL and appends services are present; the feed test once the feed is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from security_helpers import options, outcome
from security_support import PASSWORDS
from servers import ROOT, ServerProcess

from catalog import RocksCatalog
from catalog.commit_log import CommitRecord

SCHEMA = pa.schema([pa.field("x", pa.int64())])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, users_file: Path) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("wh") / "warehouse"
    catalog = RocksCatalog("setup", warehouse=str(warehouse))
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=SCHEMA)
    catalog.close()
    proc = ServerProcess(warehouse, ["--users", str(users_file)]).start()
    try:
        yield proc
    finally:
        proc.stop()


def _commit_log(server: ServerProcess) -> list[CommitRecord]:
    """Every retained commit record, read from a read-only opening of the server's warehouse."""
    catalog = RocksCatalog("probe", warehouse=str(server.warehouse), **{"read-only": "true"})
    try:
        return list(catalog.log.read(catalog.log.log_start() - 1))
    finally:
        catalog.close()


def _token(server: ServerProcess, user: str) -> tuple[bytes, bytes]:
    client = flight.FlightClient(server.location)
    try:
        return client.authenticate_basic_token(user, PASSWORDS[user])
    finally:
        client.close()


def _feed(server: ServerProcess, header: tuple[bytes, bytes], after: Any = "earliest") -> tuple[dict[str, int],
                                                                                                 list[dict[str, Any]]]:
    """(hello, events up to the head at subscription time) from commits.v1."""
    client = flight.FlightClient(server.location)
    command = json.dumps({"feed": "commits.v1", "after": after, "heartbeat_ms": 200}).encode()
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(command), options(header))
    hello: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            chunk = reader.read_chunk()
            meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata else {}
            hello = meta.get("hello", hello)
            if chunk.data is not None:
                events.extend(pa.Table.from_batches([chunk.data]).to_pylist())
            if "heartbeat" in meta or (hello and events and events[-1]["seq"] >= hello["head"]):
                break
    finally:
        reader.cancel()  # the feed never ends by itself
        try:
            writer.close()
        except flight.FlightError:
            pass
        client.close()
    return hello, events


def _append(server: ServerProcess, header: tuple[bytes, bytes], rows: list[int]) -> tuple[str, Any]:
    client = flight.FlightClient(server.location)
    table = pa.table({"x": pa.array(rows, pa.int64())})

    def put() -> Any:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), table.schema, options(header))
        writer.write_table(table)
        writer.done_writing()
        result = reader.read()
        writer.close()
        return json.loads(result.to_pybytes())

    try:
        result: Any = None

        def call() -> None:
            nonlocal result
            result = put()

        kind, exc = outcome(call)
        return kind, result if kind == "past_auth" and exc is None else exc
    finally:
        client.close()


def _adbc(server: ServerProcess, user: str) -> adbc_driver_manager.dbapi.Connection:
    return flightsql.connect(server.location, db_kwargs={"username": user, "password": PASSWORDS[user]},
                             autocommit=True)


def _maintain(server: ServerProcess, header: tuple[bytes, bytes]) -> tuple[str, Any]:
    client = flight.FlightClient(server.location)
    try:
        return outcome(lambda: list(client.do_action(flight.Action("icefloe.maintain", b'{"table": "ns.t"}'),
                                                     options(header))))
    finally:
        client.close()


def test_read_role_may_query_and_subscribe_but_writes_are_refused_and_commit_nothing(server: ServerProcess) -> None:
    rita = _token(server, "rita")
    before = _commit_log(server)
    with _adbc(server, "rita") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM ns.t")
        assert cur.fetchone() is not None
        cur.execute("SELECT x FROM ns.t WHERE x > ?", parameters=(0,))  # DoPut binding: read is enough
        cur.fetchall()
        assert conn.adbc_get_table_schema("t", db_schema_filter="ns").names == ["x"]
        with pytest.raises(adbc_driver_manager.Error, match="PermissionDenied"):
            cur.adbc_ingest("t", pa.table({"x": pa.array([1], pa.int64())}), mode="append", db_schema_name="ns")
        with pytest.raises(adbc_driver_manager.Error, match="PermissionDenied"):
            cur.execute("INSERT INTO ns.t VALUES (1)")
    kind, exc = _append(server, rita, [1, 2])
    assert kind == "permission_denied", exc
    kind, exc = _maintain(server, rita)
    assert kind == "permission_denied", exc
    assert _commit_log(server) == before  # the refused calls committed nothing


def test_write_role_appends_with_its_principal_but_may_not_maintain(server: ServerProcess) -> None:
    wendy = _token(server, "wendy")
    kind, result = _append(server, wendy, [1, 2, 3])
    assert kind == "past_auth" and isinstance(result, dict), result
    with _adbc(server, "wendy") as conn, conn.cursor() as cur:
        cur.adbc_ingest("t", pa.table({"x": pa.array([4], pa.int64())}), mode="append", db_schema_name="ns")
    kind, exc = _maintain(server, wendy)
    assert kind == "permission_denied", exc
    appends = [r for r in _commit_log(server) if r.operation == "append"]
    assert len(appends) >= 2
    assert result["commit_seq"] in {r.seq for r in appends}
    assert all(r.principal == "wendy" for r in appends), appends


@pytest.mark.skipif(not (ROOT / "flight_server/feed/service.py").exists(), reason="feed service not merged yet")
def test_feed_is_open_to_read_role_and_events_carry_the_principal(server: ServerProcess) -> None:
    kind, result = _append(server, _token(server, "alice"), [7])
    assert kind == "past_auth" and isinstance(result, dict), result
    hello, events = _feed(server, _token(server, "rita"))
    assert hello["head"] >= result["commit_seq"]
    by_seq = {e["seq"]: e for e in events}
    assert by_seq[result["commit_seq"]]["principal"] == "alice"


def test_admin_may_maintain(server: ServerProcess) -> None:
    alice = _token(server, "alice")
    kind, exc = _maintain(server, alice)
    assert (kind, exc) == ("past_auth", None)


def test_forged_ticket_with_a_write_is_refused_for_a_read_user(server: ServerProcess) -> None:
    """Statement tickets are client-visible; a read user who forges one around a write statement
    must not get it executed by DoGet (which only checks the read role)."""
    from flight_server.flightsql import protocol as p
    from flight_server.flightsql.statements import StatementHandle
    from flight_server.security.handles import HandleSigner
    from flight_server.security.tokens import KEY_FILE_NAME

    before = _commit_log(server)
    client = flight.FlightClient(server.location)
    rita = _token(server, "rita")
    try:
        # A genuine ticket for a read of ns.t (it pins the table), then the SQL swapped for a write.
        query = p.CommandStatementQuery(query="SELECT x FROM ns.t").pack()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(query), options(rita))
        ticket_cmd = p.TicketStatementQuery.unpack(info.endpoints[0].ticket.ticket)
        prefix, mac, body = ticket_cmd.statement_handle.split(b":", 2)
        genuine = StatementHandle.from_body(body)
        assert genuine.pins, "the genuine ticket pins ns.t"
        # Even signed with the warehouse key (an insider's forgery), a write never runs at DoGet.
        insider = HandleSigner([bytes.fromhex((server.warehouse / KEY_FILE_NAME).read_text().split()[0])])
        for sql in ["INSERT INTO ns.t VALUES (99)", "DELETE FROM ns.t", "DROP TABLE ns.t",
                    "COPY (SELECT 1) TO '/tmp/icefloe-forged.csv'"]:
            forged = StatementHandle(sql, genuine.default_schema, genuine.pins).body()
            for handle in (prefix + b":" + mac + b":" + forged, insider.seal("stmt", forged)):
                ticket = flight.Ticket(p.TicketStatementQuery(handle).pack())
                kind, exc = outcome(lambda ticket=ticket: client.do_get(ticket, options(rita)).read_all())  # type: ignore[misc]
                # refused (by the signature, the engine's write check, or the sandbox), never run
                assert exc is not None and kind != "unauthenticated", (sql, exc)
                assert "Traceback" not in str(exc)
    finally:
        client.close()
    assert not Path("/tmp/icefloe-forged.csv").exists()
    assert _commit_log(server) == before


def test_sql_writes_need_write_table_properties_need_admin_and_record_the_principal(server: ServerProcess) -> None:
    alter = "ALTER TABLE ns.t SET ('icefloe.snapshots.retain' = '50')"
    with _adbc(server, "wendy") as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO ns.t VALUES (41), (42)")
        with pytest.raises(adbc_driver_manager.Error, match="PermissionDenied"):
            cur.execute(alter)
        cur.execute("ALTER TABLE ns.t SET ('owner' = 'data-team')")  # not server-steering: write, as over REST
    inserted = [r for r in _commit_log(server) if r.operation == "append"][-1]
    assert inserted.principal == "wendy" and inserted.added_rows == 2
    before = _commit_log(server)
    with _adbc(server, "rita") as conn, conn.cursor() as cur:
        for sql in ["INSERT INTO ns.t VALUES (1)", "DELETE FROM ns.t", alter, "CREATE TABLE ns.u (x BIGINT)"]:
            with pytest.raises(adbc_driver_manager.Error, match="PermissionDenied"):
                cur.execute(sql)
    assert _commit_log(server) == before
    with _adbc(server, "alice") as conn, conn.cursor() as cur:
        cur.execute(alter)
    changed = _commit_log(server)[-1]
    assert changed.principal == "alice" and changed.seq == before[-1].seq + 1
