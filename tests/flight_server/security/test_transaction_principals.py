"""A Flight SQL transaction id is bound to the user who began it: nobody else may use or end it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from security_support import PASSWORDS
from servers import ServerProcess

from flight_server.flightsql import protocol as p


def _client(server: ServerProcess, user: str) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
    client = flight.FlightClient(server.location)
    header = client.authenticate_basic_token(user, PASSWORDS[user])
    return client, flight.FlightCallOptions(headers=[header])


def _update(client: flight.FlightClient, options: flight.FlightCallOptions, sql: str, tid: bytes | None) -> int:
    cmd = p.CommandStatementUpdate(query=sql, transaction_id=tid).pack()
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(cmd), pa.schema([]), options)
    writer.done_writing()
    answer = reader.read()
    writer.close()
    return p.DoPutUpdateResult.decode(answer.to_pybytes()).record_count


def _begin(client: flight.FlightClient, options: flight.FlightCallOptions) -> bytes:
    action = flight.Action("BeginTransaction", p.ActionBeginTransactionRequest().pack())
    result = list(client.do_action(action, options))
    return p.ActionBeginTransactionResult.unpack(result[0].body.to_pybytes()).transaction_id


def _end(client: flight.FlightClient, options: flight.FlightCallOptions, tid: bytes, action: int) -> None:
    body = p.ActionEndTransactionRequest(transaction_id=tid, action=action).pack()
    list(client.do_action(flight.Action("EndTransaction", body), options))


def test_transaction_is_bound_to_its_principal(auth_server: ServerProcess) -> None:
    wendy, w_opts = _client(auth_server, "wendy")
    alice, a_opts = _client(auth_server, "alice")
    rita, r_opts = _client(auth_server, "rita")
    _update(wendy, w_opts, "CREATE SCHEMA tp", None)
    _update(wendy, w_opts, "CREATE TABLE tp.t (id BIGINT)", None)
    tid = _begin(wendy, w_opts)
    _update(wendy, w_opts, "INSERT INTO tp.t VALUES (1)", tid)
    # Another user (even an admin) can neither write in it nor end it.
    with pytest.raises(flight.FlightUnauthorizedError):
        _update(alice, a_opts, "INSERT INTO tp.t VALUES (2)", tid)
    with pytest.raises(flight.FlightUnauthorizedError):
        _end(alice, a_opts, tid, p.END_TRANSACTION_COMMIT)
    # A read user may begin one (repeatable reads) but not write in it.
    rid = _begin(rita, r_opts)
    with pytest.raises(flight.FlightUnauthorizedError):
        _update(rita, r_opts, "INSERT INTO tp.t VALUES (3)", rid)
    _end(rita, r_opts, rid, p.END_TRANSACTION_ROLLBACK)
    _end(wendy, w_opts, tid, p.END_TRANSACTION_COMMIT)
    cmd = p.CommandStatementQuery(query="SELECT id FROM tp.t").pack()
    info = wendy.get_flight_info(flight.FlightDescriptor.for_command(cmd), w_opts)
    assert wendy.do_get(info.endpoints[0].ticket, w_opts).read_all().column(0).to_pylist() == [1]
