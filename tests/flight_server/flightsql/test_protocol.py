"""Protocol robustness and exact gRPC status codes, checked with a raw gRPC client and pyarrow.flight.

The raw client (grpcio) sends hand-encoded FlightService requests, so what is checked is the
status code on the wire, not a client library's interpretation of it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_wire import SQL, any_of, field_bytes, field_varint, read_fields, statement_query
from servers import ServerProcess

SERVICE = "/arrow.flight.protocol.FlightService/"
CMD = 2  # FlightDescriptor.DescriptorType.CMD


@pytest.fixture(scope="module")
def channel(sample_server: ServerProcess) -> Iterator[grpc.Channel]:
    target = sample_server.location.removeprefix("grpc://")
    with grpc.insecure_channel(target) as ch:
        yield ch


def descriptor(cmd: bytes) -> bytes:
    return field_varint(1, CMD) + field_bytes(2, cmd)


def get_flight_info(ch: grpc.Channel, cmd: bytes) -> bytes:
    call = ch.unary_unary(SERVICE + "GetFlightInfo")
    return call(descriptor(cmd), timeout=30)  # type: ignore[no-any-return]


def do_get(ch: grpc.Channel, ticket: bytes) -> list[bytes]:
    call = ch.unary_stream(SERVICE + "DoGet")
    return list(call(field_bytes(1, ticket), timeout=30))


def do_action(ch: grpc.Channel, kind: str, body: bytes = b"") -> list[bytes]:
    call = ch.unary_stream(SERVICE + "DoAction")
    return list(call(field_bytes(1, kind.encode()) + field_bytes(2, body), timeout=30))


def status_of(fn: object, *args: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args)  # type: ignore[operator]
    err = info.value
    details = err.details() or ""  # type: ignore[attr-defined]
    assert "Traceback" not in details and ".py" not in details and os.sep + "work" not in details, details
    return err.code(), details  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("cmd", "code"),
    [
        (b"", grpc.StatusCode.INVALID_ARGUMENT),
        (b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
        (b"SELECT 1", grpc.StatusCode.INVALID_ARGUMENT),
        (any_of("CommandNoSuchThing"), grpc.StatusCode.INVALID_ARGUMENT),
        (any_of("StringValue", prefix="type.googleapis.com/google.protobuf."), grpc.StatusCode.INVALID_ARGUMENT),
        (any_of("CommandStatementQuery", field_varint(1, 5)), grpc.StatusCode.INVALID_ARGUMENT),  # wrong wire type
        (any_of("CommandStatementQuery", b"\x0a\x10abc"), grpc.StatusCode.INVALID_ARGUMENT),  # truncated
        (any_of("CommandStatementQuery", field_bytes(1, b"\xc3\x28")), grpc.StatusCode.INVALID_ARGUMENT),  # bad utf-8
        (any_of("CommandStatementSubstraitPlan"), grpc.StatusCode.UNIMPLEMENTED),
        (  # transactions are supported; an unsigned transaction id is refused like any handle
            any_of("CommandStatementQuery", field_bytes(1, b"SELECT 1") + field_bytes(2, b"txn")),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (any_of("CommandStatementUpdate", field_bytes(1, b"SELECT 1")), grpc.StatusCode.INVALID_ARGUMENT),
        (statement_query("SELEC 1"), grpc.StatusCode.INVALID_ARGUMENT),
        (statement_query("SELECT 1; SELECT 2"), grpc.StatusCode.INVALID_ARGUMENT),
        (statement_query("SELECT " + "(" * 20000 + "1" + ")" * 20000), grpc.StatusCode.INVALID_ARGUMENT),
        (
            statement_query("SELECT * FROM " + "(SELECT * FROM " * 3000 + "sales.orders" + ")" * 3000),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (statement_query("SELECT * FROM sales.nope"), grpc.StatusCode.NOT_FOUND),
        (statement_query("INSERT INTO sales.orders VALUES (1, 'a')"), grpc.StatusCode.INVALID_ARGUMENT),
        (statement_query("INSERT INTO sales.nope VALUES (1, 'a', 1)"), grpc.StatusCode.NOT_FOUND),
    ],
)
def test_get_flight_info_errors(channel: grpc.Channel, cmd: bytes, code: grpc.StatusCode) -> None:
    got, _ = status_of(get_flight_info, channel, cmd)
    assert got == code


@pytest.mark.parametrize(
    "ticket",
    [
        b"",
        os.urandom(64),
        os.urandom(2 * 1024 * 1024),
        any_of("TicketStatementQuery", field_bytes(1, b"not a handle")),
        any_of("TicketStatementQuery", field_bytes(1, b'icefloe.stmt.v1:{"q": 5}')),
        any_of("TicketStatementQuery", field_bytes(1, b"icefloe.stmt.v1:" + b"[" * 100000)),
    ],
)
def test_bad_tickets_are_invalid_argument(channel: grpc.Channel, ticket: bytes) -> None:
    got, _ = status_of(do_get, channel, ticket)
    assert got == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("kind", "body", "code"),
    [
        ("NoSuchAction", b"", grpc.StatusCode.INVALID_ARGUMENT),
        ("CreatePreparedStatement", b"\xff", grpc.StatusCode.INVALID_ARGUMENT),
        ("CreatePreparedStatement", any_of("ActionClosePreparedStatementRequest"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            "ClosePreparedStatement",
            any_of("ActionClosePreparedStatementRequest", field_bytes(1, b"x")),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ("BeginTransaction", b"\xff", grpc.StatusCode.INVALID_ARGUMENT),
        (  # an unsigned transaction id
            "EndTransaction",
            any_of("ActionEndTransactionRequest", field_bytes(1, b"x")),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ("EndTransaction", any_of("ActionEndTransactionRequest"), grpc.StatusCode.INVALID_ARGUMENT),
        ("BeginSavepoint", b"", grpc.StatusCode.UNIMPLEMENTED),
        ("CreatePreparedSubstraitPlan", b"", grpc.StatusCode.UNIMPLEMENTED),
        ("CancelQuery", b"", grpc.StatusCode.UNIMPLEMENTED),
    ],
)
def test_action_errors(channel: grpc.Channel, kind: str, body: bytes, code: grpc.StatusCode) -> None:
    got, _ = status_of(do_action, channel, kind, body)
    assert got == code


def test_server_survives_and_statement_ticket_is_any_packed(channel: grpc.Channel, uri: str) -> None:
    info = read_fields(get_flight_info(channel, statement_query("SELECT 41 + 1 AS answer")))
    endpoint = read_fields(info[3][0])  # type: ignore[arg-type]
    ticket = read_fields(endpoint[1][0])[1][0]  # type: ignore[arg-type]
    any_fields = read_fields(ticket)  # type: ignore[arg-type]
    assert any_fields[1][0] == (SQL + "TicketStatementQuery").encode()

    client = flight.FlightClient(uri)
    flight_info = client.get_flight_info(
        flight.FlightDescriptor.for_command(statement_query("SELECT 41 + 1 AS answer"))
    )
    table = client.do_get(flight_info.endpoints[0].ticket).read_all()
    assert table.column("answer").to_pylist() == [42]
    assert table.schema == flight_info.schema  # dataset schema is what DoGet sends
    client.close()


def test_metadata_schemas_match_the_spec(uri: str) -> None:
    client = flight.FlightClient(uri)

    def fetch(cmd: bytes) -> tuple[pa.Schema, pa.Table]:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(cmd))
        table = client.do_get(info.endpoints[0].ticket).read_all()
        assert table.schema == info.schema
        return info.schema, table

    schema, table = fetch(any_of("CommandGetCatalogs"))
    assert schema == pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
    assert table.column(0).to_pylist() == ["icefloe"]

    schema, table = fetch(any_of("CommandGetDbSchemas", field_bytes(2, b"ana%")))
    assert schema == pa.schema([pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), False)])
    assert table.column("db_schema_name").to_pylist() == ["analytics", "analytics.daily"]

    schema, table = fetch(
        any_of("CommandGetTables", field_bytes(2, b"sales") + field_bytes(3, b"e%") + field_varint(5, 1))
    )
    assert schema.names == ["catalog_name", "db_schema_name", "table_name", "table_type", "table_schema"]
    assert [f.nullable for f in schema] == [True, True, False, False, False]
    assert table.column("table_name").to_pylist() == ["empty", "evolved"]
    evolved = pa.ipc.read_schema(pa.py_buffer(table.column("table_schema")[1].as_py()))
    assert evolved.names == ["a", "label", "c"]
    meta = evolved.field("label").metadata
    assert meta[b"ARROW:FLIGHT:SQL:TABLE_NAME"] == b"evolved"
    assert meta[b"ARROW:FLIGHT:SQL:DB_SCHEMA_NAME"] == b"sales"
    assert meta[b"ARROW:FLIGHT:SQL:TYPE_NAME"] == b"VARCHAR"

    _, table = fetch(any_of("CommandGetTables", field_bytes(4, b"VIEW")))
    assert table.num_rows == 0

    schema, table = fetch(any_of("CommandGetSqlInfo", field_varint(1, 0) + field_varint(1, 3) + field_varint(1, 504)))
    union = schema.field("value").type
    assert schema.field("info_name") == pa.field("info_name", pa.uint32(), nullable=False)
    assert not schema.field("value").nullable
    assert union.mode == "dense"
    assert [union.field(i).name for i in range(union.num_fields)] == [
        "string_value",
        "bool_value",
        "bigint_value",
        "int32_bitmask",
        "string_list",
        "int32_to_int32_list_map",
    ]
    assert union.field(5).type == pa.map_(pa.int32(), pa.list_(pa.int32()))
    assert dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True)) == {
        0: "icefloe",
        3: False,
        504: '"',
    }

    for name in ("CommandGetPrimaryKeys", "CommandGetExportedKeys", "CommandGetImportedKeys"):
        schema, table = fetch(any_of(name, field_bytes(3, b"orders")))
        assert table.num_rows == 0
    schema, _ = fetch(any_of("CommandGetCrossReference", field_bytes(3, b"a") + field_bytes(6, b"b")))
    assert [f.name for f in schema if not f.nullable] == [
        "pk_table_name",
        "pk_column_name",
        "fk_table_name",
        "fk_column_name",
        "key_sequence",
        "update_rule",
        "delete_rule",
    ]

    schema, table = fetch(any_of("CommandGetXdbcTypeInfo", field_varint(1, 12)))
    assert table.column("type_name").to_pylist() == ["VARCHAR"]
    assert schema.field("create_params").type == pa.list_(pa.field("item", pa.utf8(), nullable=False))
    client.close()


def test_session_options_over_actions(uri: str) -> None:
    """SetSessionOptions/GetSessionOptions/CloseSession with the session carried by the cookie."""

    class Cookies(flight.ClientMiddlewareFactory):
        cookie: str | None = None

        def start_call(self, info: object) -> flight.ClientMiddleware:
            factory = self

            class M(flight.ClientMiddleware):
                def sending_headers(self) -> dict[str, str]:
                    return {"cookie": factory.cookie} if factory.cookie else {}

                def received_headers(self, headers: dict[str, list[str]]) -> None:
                    for value in headers.get("set-cookie", []):
                        factory.cookie = value.split(";")[0]

            return M()

    client = flight.FlightClient(uri, middleware=[Cookies()])
    string_value = field_bytes(1, b"sales")
    request = field_bytes(1, field_bytes(1, b"schema") + field_bytes(2, string_value))
    request += field_bytes(1, field_bytes(1, b"bogus") + field_bytes(2, string_value))
    (result,) = [r.body.to_pybytes() for r in client.do_action(flight.Action("SetSessionOptions", request))]
    errors = [read_fields(e) for e in read_fields(result).get(1, [])]  # type: ignore[arg-type]
    assert [e[1][0] for e in errors] == [b"bogus"]
    assert read_fields(errors[0][2][0])[1] == [1]  # type: ignore[arg-type]  # INVALID_NAME

    (got,) = [r.body.to_pybytes() for r in client.do_action(flight.Action("GetSessionOptions", b""))]
    options = {
        read_fields(e)[1][0]: read_fields(read_fields(e)[2][0])[1][0]  # type: ignore[arg-type]
        for e in read_fields(got)[1]
    }  # type: ignore[arg-type]
    assert options == {b"catalog": b"icefloe", b"schema": b"sales"}

    info = client.get_flight_info(
        flight.FlightDescriptor.for_command(statement_query("SELECT count(*) AS n FROM orders"))
    )
    assert client.do_get(info.endpoints[0].ticket).read_all().column("n").to_pylist() == [4]

    (closed,) = [r.body.to_pybytes() for r in client.do_action(flight.Action("CloseSession", b""))]
    assert read_fields(closed)[1] == [1]  # CLOSED
    with pytest.raises(pa.ArrowKeyError, match="orders does not exist"):  # NOT_FOUND: the schema option is gone
        client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT * FROM orders")))
    client.close()


def test_sessions_follow_the_bearer_token(uri: str) -> None:
    """Two connections presenting the same bearer token share a session; another token does not."""

    def client_with(token: str) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
        return flight.FlightClient(uri), flight.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {token}".encode())]
        )

    first, opts = client_with("token-a")
    request = field_bytes(1, field_bytes(1, b"schema") + field_bytes(2, field_bytes(1, b"analytics.daily")))
    list(first.do_action(flight.Action("SetSessionOptions", request), opts))
    first.close()

    second, opts = client_with("token-a")
    info = second.get_flight_info(
        flight.FlightDescriptor.for_command(statement_query("SELECT sum(n) AS s FROM visits")), opts
    )
    assert second.do_get(info.endpoints[0].ticket, opts).read_all().column("s").to_pylist() == [15]
    second.close()

    other, opts = client_with("token-b")
    with pytest.raises(pa.ArrowKeyError):
        other.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT * FROM visits")), opts)
    other.close()


def test_error_in_the_middle_of_a_stream_is_clean(channel: grpc.Channel, uri: str) -> None:
    """DuckDB failing after rows were sent: the code is UNKNOWN (the error surfaces inside Arrow's
    C++ stream, where it cannot be mapped), but the message is DuckDB's, without a traceback."""
    sql = "SELECT CASE WHEN i > 500000 THEN error('boom at row') ELSE i END AS v FROM range(1000000) t(i)"
    client = flight.FlightClient(uri)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
    code, details = status_of(do_get, channel, info.endpoints[0].ticket.ticket)
    assert code == grpc.StatusCode.UNKNOWN
    assert "boom at row" in details
    again = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT 42 AS x")))
    assert client.do_get(again.endpoints[0].ticket).read_all().column("x").to_pylist() == [42]
    client.close()


def test_streams_failing_midway_leave_the_server_up(sample_server: ServerProcess, channel: grpc.Channel) -> None:
    """Regression (CI, stop 27): the server died with SIGSEGV within a few queries that failed
    mid-stream. A failed stream's reader outlived its call, and the query watchdog asked the
    call's freed context whether the client had cancelled."""
    sql = "SELECT CASE WHEN i > 300000 THEN error('boom again') ELSE i END AS v FROM range(400000) t(i)"
    client = flight.FlightClient(sample_server.location)
    for _ in range(25):
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        code, details = status_of(do_get, channel, info.endpoints[0].ticket.ticket)
        assert (code, "boom again" in details) == (grpc.StatusCode.UNKNOWN, True), (details, sample_server.log[-3000:])
        time.sleep(0.05)  # the watchdog looks ten times a second: let it see the ended calls
    assert sample_server.proc is not None and sample_server.proc.poll() is None, sample_server.log[-3000:]
    again = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT 42 AS x")))
    assert client.do_get(again.endpoints[0].ticket).read_all().column("x").to_pylist() == [42]
    client.close()


def test_streams_cancelled_midway_leave_no_query_behind(sample_server: ServerProcess) -> None:
    """Clients that read a little of a long result and cancel, more of them than there are
    query slots (16): each query is stopped and its slot given back, none holds the next."""
    sql = "SELECT i, i * 2 AS j FROM range(50000000) t(i)"
    client = flight.FlightClient(sample_server.location)
    for _ in range(20):
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        reader = client.do_get(info.endpoints[0].ticket)
        assert reader.read_chunk().data.num_rows > 0
        reader.cancel()
        del reader
    assert sample_server.proc is not None and sample_server.proc.poll() is None, sample_server.log[-3000:]
    again = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT 42 AS x")))
    assert client.do_get(again.endpoints[0].ticket).read_all().column("x").to_pylist() == [42]
    status = json.loads(next(iter(client.do_action(flight.Action("icefloe.status", b"")))).body.to_pybytes())
    deadline = time.monotonic() + 10
    while status["queries"]["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
        status = json.loads(next(iter(client.do_action(flight.Action("icefloe.status", b"")))).body.to_pybytes())
    assert status["queries"] == {"running": 0, "queued": 0}
    client.close()


@pytest.mark.parametrize(
    ("native", "dataset"),
    [
        ("id = 4", "id + 0 = 4"),
        ("customer IN ('ann', 'dee')", "customer || '' IN ('ann', 'dee')"),
        ("amount BETWEEN 10.0 AND 21.0", "amount + 0 BETWEEN 10.0 AND 21.0"),
    ],
)
def test_selective_native_scan_matches_dataset_scan(uri: str, native: str, dataset: str) -> None:
    """Selective single-table queries read through DuckDB's own Parquet reader; the result and
    its schema must be what the Arrow-dataset path (forced by a non-simple predicate) returns."""
    client = flight.FlightClient(uri)

    def run(where: str) -> tuple[pa.Schema, pa.Table]:
        sql = f"SELECT * FROM sales.orders WHERE {where} ORDER BY id"
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        return info.schema, client.do_get(info.endpoints[0].ticket).read_all()

    native_schema, native_rows = run(native)
    dataset_schema, dataset_rows = run(dataset)
    assert native_schema == dataset_schema == native_rows.schema
    assert native_rows.equals(dataset_rows)
    assert native_rows.num_rows > 0
    client.close()


@pytest.mark.parametrize(
    ("sql", "is_update", "has_schema"),
    [
        ("SELECT id FROM sales.orders WHERE id = ?", 0, True),
        ("INSERT INTO sales.orders VALUES (?, 'x', 1.0)", 1, False),
    ],
)
def test_create_prepared_statement_result(channel: grpc.Channel, sql: str, is_update: int, has_schema: bool) -> None:
    """Any-packed result: handle, dataset_schema only for queries, parameter schema, is_update (field 4)."""
    (raw,) = do_action(
        channel, "CreatePreparedStatement", any_of("ActionCreatePreparedStatementRequest", field_bytes(1, sql.encode()))
    )
    body = read_fields(raw)[1][0]  # Result.body
    packed = read_fields(body)  # type: ignore[arg-type]
    assert packed[1] == [(SQL + "ActionCreatePreparedStatementResult").encode()]
    result = read_fields(packed[2][0])  # type: ignore[arg-type]
    assert result[1][0]  # a handle
    assert (2 in result) == has_schema
    params = pa.ipc.read_schema(pa.py_buffer(result[3][0]))  # type: ignore[arg-type]
    assert len(params) == 1
    assert result[4] == [is_update]
