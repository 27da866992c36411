"""Raw pyarrow.flight calls of every RPC kind, and credential helpers, for the auth tests."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
AUTH_ERRORS = (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def any_command(message: str, value: bytes = b"") -> bytes:
    """A protobuf ``Any`` wrapping a Flight SQL command (type URL + serialized message)."""
    url = (SQL_PREFIX + message).encode()
    return b"\x0a" + _varint(len(url)) + url + b"\x12" + _varint(len(value)) + value


def basic(user: str, password: str) -> tuple[bytes, bytes]:
    return b"authorization", b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def options(*headers: tuple[bytes, bytes]) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=list(headers), timeout=30)


def _drain_put(client: flight.FlightClient, descriptor: flight.FlightDescriptor, opts: flight.FlightCallOptions) -> Any:
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    writer, reader = client.do_put(descriptor, table.schema, opts)
    try:
        writer.write_table(table)
        writer.done_writing()
        return reader.read()
    finally:
        writer.close()


def _exchange(client: flight.FlightClient, opts: flight.FlightCallOptions) -> Any:
    descriptor = flight.FlightDescriptor.for_command(b'{"feed": "commits.v1", "after": "latest"}')
    writer, reader = client.do_exchange(descriptor, opts)
    try:
        writer.done_writing()
        return reader.read_chunk()
    finally:
        # A feed never ends by itself: without the cancel, close() waits for the call's
        # deadline (30 s per test).
        reader.cancel()
        try:
            writer.close()
        except flight.FlightCancelledError:
            pass


# name -> (least role that gets past auth, call)
RPCS: dict[str, tuple[str, Callable[[flight.FlightClient, flight.FlightCallOptions], Any]]] = {
    "GetFlightInfo": ("read", lambda c, o: c.get_flight_info(
        flight.FlightDescriptor.for_command(any_command("CommandGetCatalogs")), o)),
    "GetSchema": ("read", lambda c, o: c.get_schema(
        flight.FlightDescriptor.for_command(any_command("CommandGetDbSchemas")), o)),
    "DoGet": ("read", lambda c, o: c.do_get(flight.Ticket(any_command("CommandGetCatalogs")), o).read_all()),
    "DoPut(path)": ("write", lambda c, o: _drain_put(c, flight.FlightDescriptor.for_path("ns", "t"), o)),
    "DoPut(CommandStatementUpdate)": ("write", lambda c, o: _drain_put(
        c, flight.FlightDescriptor.for_command(any_command("CommandStatementUpdate")), o)),
    "DoPut(CommandPreparedStatementQuery)": ("read", lambda c, o: _drain_put(
        c, flight.FlightDescriptor.for_command(any_command("CommandPreparedStatementQuery")), o)),
    "DoExchange": ("read", _exchange),
    "DoAction(CreatePreparedStatement)": ("read", lambda c, o: list(
        c.do_action(flight.Action("CreatePreparedStatement", b""), o))),
    "DoAction(unknown)": ("write", lambda c, o: list(c.do_action(flight.Action("icefloe.no-such-action", b""), o))),
    "ListActions": ("read", lambda c, o: c.list_actions(o)),
    "ListFlights": ("read", lambda c, o: list(c.list_flights(b"", o))),
}


def outcome(call: Callable[[], Any]) -> tuple[str, BaseException | None]:
    """"unauthenticated", "permission_denied" or "past_auth" (any other result or error)."""
    try:
        call()
    except flight.FlightUnauthenticatedError as exc:
        return "unauthenticated", exc
    except flight.FlightUnauthorizedError as exc:
        return "permission_denied", exc
    except Exception as exc:  # the placeholder services answer UNIMPLEMENTED after auth
        # pyarrow's client raises GetSchema errors as a plain OSError; the code is in the detail.
        if "Detail: Unauthenticated" in str(exc):
            return "unauthenticated", exc
        if "Detail: Unauthorized" in str(exc):
            return "permission_denied", exc
        return "past_auth", exc
    return "past_auth", None
