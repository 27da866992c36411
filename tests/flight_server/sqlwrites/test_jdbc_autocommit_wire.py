"""What the stock Arrow Flight SQL JDBC driver (18.3) puts on the wire for
``setAutoCommit(false)``, ``commit()`` and ``rollback()``: nothing at all.

The server records every RPC it receives (a middleware sees each call, handshake and
unimplemented ones included; the handlers note each command's type, each action's type and
each statement's SQL). A Java program fences each JDBC step with a marker query, so the record
can be cut into steps. The driver's source says the same: ``ArrowFlightMetaImpl.commit`` and
``rollback`` are empty stubs ("TODO Fill this stub", lines 87 and 240 at arrow-java v18.3.0)
and it does not override Avatica's ``connectionSync``, which only updates the local
properties. This is why the server cannot honour ``setAutoCommit(false)`` for JDBC, and why
docs/flight-sql.md tells JDBC users to use SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``.
If a later driver starts sending something for these calls, this test fails: then make the
server honour it (test_jdbc_transactions.py's strict xfail turns into a failure as well).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from jdbc_support import run_java_program

from flight_server.config import Config
from flight_server.flightsql.protocol import (
    ActionCreatePreparedStatementRequest,
    CommandStatementUpdate,
    decode_command,
)
from flight_server.server import IcefloeServer

HERE = Path(__file__).parent


class _Calls(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    """Every RPC the server receives, in order: ("rpc", method) per call, and the handlers'
    ("cmd", detail) notes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def note(self, kind: str, detail: str) -> None:
        with self.lock:
            self.events.append((kind, detail))

    def start_call(self, info: Any, headers: dict[str, Any]) -> None:
        self.note("rpc", str(info.method).rsplit(".", 1)[-1])
        return None


def _describe(command: bytes) -> str:
    try:
        msg = decode_command(command)
    except Exception:  # noqa: BLE001 - not a Flight SQL command: record that it came
        return "other-command"
    query = getattr(msg, "query", None)
    txn = getattr(msg, "transaction_id", None)
    return type(msg).__name__ + (f" {query}" if query else "") + (" +txn" if txn else "")


class _RecordingServer(IcefloeServer):
    def __init__(self, config: Config, calls: _Calls) -> None:
        self.calls = calls
        super().__init__(config, middleware={"wire-record": calls})

    def get_flight_info(self, context: Any, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        self.calls.note("cmd", "GetFlightInfo " + _describe(descriptor.command or b""))
        return super().get_flight_info(context, descriptor)

    def do_put(self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any) -> None:
        self.calls.note("cmd", "DoPut " + _describe(descriptor.command or b""))
        return super().do_put(context, descriptor, reader, writer)

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        detail = action.type
        if action.type == "CreatePreparedStatement":
            request = ActionCreatePreparedStatementRequest.unpack(action.body.to_pybytes())
            detail += f" {request.query}" + (" +txn" if request.transaction_id else "")
        self.calls.note("cmd", "DoAction " + detail)
        return super().do_action(context, action)


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """The recorded calls, cut at the marker queries: {step: calls between its marker and the next}."""
    calls = _Calls()
    server = _RecordingServer(Config(warehouse=str(tmp_path_factory.mktemp("jdbc_wire") / "wh"), port=0), calls)
    try:
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        for sql in ("CREATE SCHEMA jw", "CREATE TABLE jw.a (id BIGINT)"):
            writer, _ = client.do_put(flight.FlightDescriptor.for_command(CommandStatementUpdate(query=sql).pack()),
                                      pa.schema([]))
            writer.close()
        client.close()
        calls.events.clear()
        url = f"jdbc:arrow-flight-sql://127.0.0.1:{server.port}?useEncryption=false"
        run = run_java_program(HERE / "jdbc" / "JdbcAutocommitWire.java",
                               tmp_path_factory.mktemp("jdbc_wire_classes"), [url], 180)
    finally:
        server.shutdown_and_close()
    assert run.returncode == 0, run.stderr[-3000:]
    assert "CHECK inserted 1" in run.stdout
    steps: dict[str, list[tuple[str, str]]] = {"connect": []}
    current = "connect"
    for kind, detail in calls.events:
        if kind == "cmd" and "SELECT 'phase:" in detail:
            current = detail.split("SELECT 'phase:", 1)[1].split("'", 1)[0]
            steps[current] = []
        steps[current].append((kind, detail))
    return steps


# What a marker query itself sends after its statement is prepared: its FlightInfo, its
# stream and the statement's close.
_MARKER_OWN = {("rpc", "GET_FLIGHT_INFO"), ("rpc", "DO_GET"), ("rpc", "DO_ACTION"),
               ("cmd", "GetFlightInfo CommandPreparedStatementQuery"), ("cmd", "DoAction ClosePreparedStatement")}


@pytest.mark.parametrize("step", ["setautocommit", "commit", "rollback"])
def test_the_driver_sends_nothing_for_the_transaction_calls(wire: dict[str, list[tuple[str, str]]], step: str) -> None:
    calls = wire[step]
    assert calls[0][1].startswith("DoAction CreatePreparedStatement")  # the marker itself
    assert set(calls[1:]) <= _MARKER_OWN, calls


def test_statements_after_set_autocommit_false_carry_no_transaction(wire: dict[str, list[tuple[str, str]]]) -> None:
    sent = [detail for kind, detail in wire["insert"] + wire["insert2"] if kind == "cmd"]
    inserts = [d for d in sent if "INSERT INTO jw.a" in d]
    assert inserts, sent
    assert not any("+txn" in d for d in sent), sent
    assert not any(word in d for d in sent for word in ("BeginTransaction", "EndTransaction", "SessionOption"))
