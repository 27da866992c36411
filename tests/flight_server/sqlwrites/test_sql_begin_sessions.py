"""SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` keep their transaction in the caller's session
(bearer token or the ``arrow_flight_session_id`` cookie). A client that asked for a
transaction gets one or a precise refusal, never statements that silently run on their own:

- a client that drops cookies: ``BEGIN`` is answered (its cookie is offered on the response),
  but its next statement on that connection comes back without it and is refused with
  ``FAILED_PRECONDITION``; the transaction is rolled back and nothing lands;
- ``COMMIT`` / ``ROLLBACK`` with no transaction open in the session: ``FAILED_PRECONDITION``.

Driven by a raw pyarrow.flight Flight SQL client (with and without a cookie jar) and by ADBC
(autocommit on, with and without its cookie middleware); a second client checks visibility.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from servers import ServerProcess
from sqlwrites_lib import scalar, update

from flight_server.flightsql import protocol as p


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("begin") / "warehouse").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def other(server: ServerProcess) -> Iterator[Any]:
    conn = fsql.connect(server.location, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


class CookieJar(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Sends back the cookie the server set, as the JDBC driver and browsers do."""

    def __init__(self) -> None:
        self.cookie: str | None = None

    def start_call(self, info: object) -> flight.ClientMiddleware:
        jar = self

        class Middleware(flight.ClientMiddleware):  # type: ignore[misc]
            def sending_headers(self) -> dict[str, str]:
                return {"cookie": jar.cookie} if jar.cookie else {}

            def received_headers(self, headers: dict[str, list[str]]) -> None:
                for value in headers.get("set-cookie", []):
                    jar.cookie = value.split(";")[0]

        return Middleware()


def _update(client: flight.FlightClient, sql: str) -> int:
    """A CommandStatementUpdate over DoPut, as a Flight SQL client sends it."""
    descriptor = flight.FlightDescriptor.for_command(p.CommandStatementUpdate(query=sql).pack())
    writer, reader = client.do_put(descriptor, pa.schema([]))
    writer.done_writing()
    answer = reader.read()
    writer.close()
    return int(p.DoPutUpdateResult.decode(answer.to_pybytes()).record_count) if answer is not None else -1


def _tables(other: Any, ns: str) -> None:
    update(other, f"CREATE SCHEMA {ns}")
    update(other, f"CREATE TABLE {ns}.a (id BIGINT)")
    update(other, f"CREATE TABLE {ns}.b (id BIGINT)")


def _counts(other: Any, ns: str) -> tuple[int, int]:
    return scalar(other, f"SELECT count(*) FROM {ns}.a"), scalar(other, f"SELECT count(*) FROM {ns}.b")


def test_a_client_that_drops_cookies_gets_a_refusal_not_autocommit(server: ServerProcess, other: Any) -> None:
    _tables(other, "nc")
    client = flight.FlightClient(server.location)  # no cookie jar
    try:
        _update(client, "BEGIN")
        with pytest.raises(pa.ArrowInvalid, match="^FAILED_PRECONDITION: .*session cookie") as info:
            _update(client, "INSERT INTO nc.a VALUES (1)")
        assert "rolled back" in str(info.value) and "Traceback" not in str(info.value)
        assert _counts(other, "nc") == (0, 0)
        # The transaction is gone: COMMIT says there is nothing to commit, precisely.
        with pytest.raises(pa.ArrowInvalid, match="^FAILED_PRECONDITION: COMMIT outside a transaction"):
            _update(client, "COMMIT")
        # A client that never asked for a transaction is not affected: its writes land on their own.
        assert _update(client, "INSERT INTO nc.a VALUES (2)") == 1
        assert _counts(other, "nc") == (1, 0)
        # BEGIN then COMMIT with nothing between, still without the cookie: refused as well.
        _update(client, "BEGIN")
        with pytest.raises(pa.ArrowInvalid, match="^FAILED_PRECONDITION: .*session cookie"):
            _update(client, "COMMIT")
    finally:
        client.close()


def test_a_pending_begin_does_not_judge_other_connections(server: ServerProcess, other: Any) -> None:
    _tables(other, "nc2")
    first, second = flight.FlightClient(server.location), flight.FlightClient(server.location)
    try:
        _update(first, "BEGIN")
        assert _update(second, "INSERT INTO nc2.a VALUES (1)") == 1  # its own connection: autocommit
        with pytest.raises(pa.ArrowInvalid, match="^FAILED_PRECONDITION: .*session cookie"):
            _update(first, "INSERT INTO nc2.b VALUES (1)")
        assert _counts(other, "nc2") == (1, 0)
    finally:
        first.close()
        second.close()


def test_a_client_that_keeps_cookies_gets_the_transaction(server: ServerProcess, other: Any) -> None:
    _tables(other, "kc")
    client = flight.FlightClient(server.location, middleware=[CookieJar()])
    try:
        _update(client, "BEGIN")  # the first call: its cookie arrives on this response
        assert _update(client, "INSERT INTO kc.a VALUES (1), (2)") == 2
        assert _update(client, "INSERT INTO kc.b VALUES (1)") == 1
        assert _counts(other, "kc") == (0, 0)
        _update(client, "COMMIT")
        assert _counts(other, "kc") == (2, 1)
        _update(client, "BEGIN")
        _update(client, "INSERT INTO kc.a VALUES (3)")
        _update(client, "ROLLBACK")
        assert _counts(other, "kc") == (2, 1)
        for verb in ("COMMIT", "ROLLBACK"):
            with pytest.raises(pa.ArrowInvalid, match=f"^FAILED_PRECONDITION: {verb} outside a transaction"):
                _update(client, verb)
    finally:
        client.close()


def test_adbc_without_cookies_is_refused_and_lands_nothing(server: ServerProcess, other: Any) -> None:
    _tables(other, "ad")
    conn = fsql.connect(server.location, autocommit=True)
    try:
        update(conn, "BEGIN")
        with pytest.raises(adbc_driver_manager.Error, match="session cookie") as info:
            update(conn, "INSERT INTO ad.a VALUES (1)")
        assert "FAILED_PRECONDITION" in str(info.value) or "precondition" in str(info.value).lower()
        assert _counts(other, "ad") == (0, 0)
    finally:
        conn.close()


def test_adbc_with_its_cookie_middleware_gets_the_transaction(server: ServerProcess, other: Any) -> None:
    _tables(other, "ac")
    conn = fsql.connect(server.location, autocommit=True,
                        db_kwargs={"adbc.flight.sql.rpc.with_cookie_middleware": "true"})
    try:
        update(conn, "BEGIN")
        update(conn, "INSERT INTO ac.a VALUES (1)")
        update(conn, "INSERT INTO ac.b VALUES (1)")
        assert _counts(other, "ac") == (0, 0)
        update(conn, "COMMIT")
        assert _counts(other, "ac") == (1, 1)
        with pytest.raises(adbc_driver_manager.Error, match="ROLLBACK outside a transaction"):
            update(conn, "ROLLBACK")
    finally:
        conn.close()
