"""The trust boundary, tried from outside as a ``read`` client would: every byte a client sends
back (tickets, handles, parameters, table names) is hostile.

One real server per module, started in a scratch working directory that holds DuckDB's
default temp folder (``.tmp``) and WAL name (``:memory:.wal``) with a secret in each. After every
case the server answers, nothing in its working directory or warehouse changed, and the commit
head did not move.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_samples import make_sample_warehouse
from flightsql_wire import any_of, field_bytes, field_varint, read_fields, statement_query
from servers import ServerProcess

from flight_server.security.handles import HandleSigner
from flight_server.security.tokens import KEY_FILE_NAME

SECRET = "icefloe-secret-7f3a"
INTERNAL_HINTS = ("sqlite_", "pg_enum", "pg_", "duckdb_", "__icefloe", "information_schema")


class Boundary:
    def __init__(self, proc: ServerProcess, cwd: Path) -> None:
        self.proc = proc
        self.cwd = cwd
        self.client = flight.FlightClient(proc.location)
        match = re.search(r"DuckDB spills to (\S+)", proc.log)
        assert match, proc.log
        self.spill = Path(match.group(1))

    def info(self, sql: str) -> flight.FlightInfo:
        return self.client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))

    def rows(self, sql: str) -> pa.Table:
        return self.client.do_get(self.info(sql).endpoints[0].ticket).read_all()

    def ticket_of(self, sql: str) -> bytes:
        """The statement handle inside a genuine ticket for ``sql``."""
        outer = read_fields(self.info(sql).endpoints[0].ticket.ticket)
        inner = read_fields(outer[2][0])  # type: ignore[arg-type]
        return inner[1][0]  # type: ignore[return-value]

    def do_get_handle(self, handle: bytes) -> pa.Table:
        ticket = any_of("TicketStatementQuery", field_bytes(1, handle))
        return self.client.do_get(flight.Ticket(ticket)).read_all()

    def head(self) -> int:
        from catalog import RocksCatalog

        cat = RocksCatalog("probe", warehouse=str(self.proc.warehouse), **{"read-only": "true"})
        try:
            return int(cat.log.head())
        finally:
            cat.close()

    def signer(self) -> HandleSigner:
        """The warehouse's own key: what only an insider (or another server) holds."""
        text = (self.proc.warehouse / KEY_FILE_NAME).read_text().split()
        return HandleSigner([bytes.fromhex(text[0])])


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "catalog.rocksdb" not in p.parts
    }


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boundary]:
    root = tmp_path_factory.mktemp("boundary")
    warehouse = root / "warehouse"
    make_sample_warehouse(warehouse)
    cwd = root / "cwd"
    (cwd / ".tmp").mkdir(parents=True)
    (cwd / ".tmp" / "spilled.csv").write_text(f"a\n{SECRET}\n")
    (cwd / ":memory:.wal").write_text(SECRET)
    proc = ServerProcess(warehouse, ["--query-timeout", "3"], cwd=cwd).start()
    b = Boundary(proc, cwd)
    try:
        yield b
    finally:
        b.client.close()
        proc.stop()


@pytest.fixture
def unchanged(boundary: Boundary) -> Iterator[None]:
    """The case must leave the server up, its folders unchanged and the catalog uncommitted."""
    before = (_digest(boundary.cwd), _digest(boundary.proc.warehouse), boundary.head())
    yield
    assert boundary.rows("SELECT 41 + 1 AS x").column("x").to_pylist() == [42]
    assert boundary.proc.proc is not None and boundary.proc.proc.poll() is None
    assert (_digest(boundary.cwd), _digest(boundary.proc.warehouse), boundary.head()) == before


def _refused(fn: object, *args: object, code: type[BaseException] = flight.FlightError) -> str:
    with pytest.raises((code, pa.ArrowException)) as info:
        fn(*args)  # type: ignore[operator]
    message = str(info.value)
    assert "Traceback" not in message, message
    return message


# -- 1. tickets and handles -------------------------------------------------------------------

DANGEROUS = [
    "ATTACH ':memory:' AS pwned",
    "DETACH icefloe",
    "SET VARIABLE pwned = 1",
    "LOAD httpfs",
    "CHECKPOINT",
    "EXPORT DATABASE 'exported'",
    "COPY (SELECT 1 AS x) TO 'copied.csv'",
    "SELECT * FROM read_text('.tmp/spilled.csv')",
    "SELECT current_setting('temp_directory') AS x",
    "UPDATE EXTENSIONS",
]


@pytest.mark.parametrize("sql", DANGEROUS)
def test_hand_built_ticket_is_refused(boundary: Boundary, unchanged: None, sql: str) -> None:
    """The old, unsigned handle format a client could write by hand."""
    body = json.dumps({"q": sql, "s": None, "t": [], "v": None}).encode()
    for handle in (b"icefloe.stmt.v1:" + body, b"icefloe.stmt.v2:" + b"A" * 43 + b":" + body, body):
        message = _refused(boundary.do_get_handle, handle, code=flight.FlightError)
        assert "INVALID_ARGUMENT" in message or "not an icefloe" in message or "not signed" in message


@pytest.mark.parametrize("sql", DANGEROUS)
def test_insider_signed_ticket_still_cannot_run_what_getflightinfo_refuses(
    boundary: Boundary, unchanged: None, sql: str
) -> None:
    """Defence in depth: even a correctly signed ticket runs only what planning would accept."""
    body = json.dumps({"q": sql, "s": None, "t": [], "v": None}).encode()
    handle = boundary.signer().seal("stmt", body)
    _refused(boundary.do_get_handle, handle)
    assert not list(boundary.cwd.glob("exported*")) and not (boundary.cwd / "copied.csv").exists()


def test_altered_ticket_is_refused(boundary: Boundary, unchanged: None) -> None:
    genuine = boundary.ticket_of("SELECT id FROM sales.orders")
    assert boundary.do_get_handle(genuine).num_rows == 4
    swapped = genuine.replace(b"SELECT id FROM", b"SELECT * FROM ")
    assert swapped != genuine
    flipped = bytearray(genuine)
    flipped[-3] ^= 0x01
    for handle in (swapped, bytes(flipped), genuine[:-1], genuine + b" ", genuine[:30]):
        message = _refused(boundary.do_get_handle, handle)
        assert "signed" in message or "icefloe" in message or "malformed" in message


def test_ticket_signed_by_another_warehouse_is_refused(boundary: Boundary, unchanged: None) -> None:
    foreign = HandleSigner([os.urandom(32)])
    body = json.dumps({"q": "SELECT 1 AS x", "s": None, "t": [], "v": None}).encode()
    assert "not signed by this warehouse" in _refused(boundary.do_get_handle, foreign.seal("stmt", body))


def test_raw_commands_and_other_handles_are_not_tickets(boundary: Boundary, unchanged: None) -> None:
    # A metadata command sent straight to DoGet instead of GetFlightInfo's ticket.
    _refused(boundary.client.do_get, flight.Ticket(any_of("CommandGetCatalogs")))
    _refused(boundary.client.do_get, flight.Ticket(statement_query("SELECT 1")))
    # A prepared-statement handle is signed, but for another purpose.
    prepared = _create_prepared(boundary, "SELECT 1 AS x")
    _refused(boundary.do_get_handle, prepared)
    # The metadata ticket GetFlightInfo gives is genuine and works.
    info = boundary.client.get_flight_info(flight.FlightDescriptor.for_command(any_of("CommandGetCatalogs")))
    assert boundary.client.do_get(info.endpoints[0].ticket).read_all().num_rows == 1


def _create_prepared(boundary: Boundary, sql: str) -> bytes:
    body = any_of("ActionCreatePreparedStatementRequest", field_bytes(1, sql.encode()))
    result = next(iter(boundary.client.do_action(flight.Action("CreatePreparedStatement", body))))
    packed = read_fields(result.body.to_pybytes())
    return read_fields(packed[2][0])[1][0]  # type: ignore[arg-type,return-value]


def _prepared_query(handle: bytes) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(any_of("CommandPreparedStatementQuery", field_bytes(1, handle)))


def test_altered_prepared_handle_is_refused_everywhere(boundary: Boundary, unchanged: None) -> None:
    handle = _create_prepared(boundary, "SELECT ? + 1 AS x")
    forged = handle.replace(b"SELECT ? + 1", b"COPY (SELECT 1) TO 'x.csv'")
    body = json.dumps({"q": "ATTACH ':memory:' AS p", "s": None, "k": "query", "v": None}).encode()
    params = pa.table({"p": [1]})
    for bad in (forged, b"icefloe.prep.v1:" + body, handle[:-2]):
        _refused(boundary.client.get_flight_info, _prepared_query(bad))
        close = any_of("ActionClosePreparedStatementRequest", field_bytes(1, bad))
        _refused(lambda c=close: list(boundary.client.do_action(flight.Action("ClosePreparedStatement", c))))
        writer, reader = boundary.client.do_put(_prepared_query(bad), params.schema)

        def put(w: flight.FlightStreamWriter = writer, r: flight.FlightMetadataReader = reader) -> None:
            w.write_table(params)
            w.done_writing()
            r.read()
            w.close()

        _refused(put)


def test_parameter_bomb_in_a_handle_is_refused_before_it_is_decoded(boundary: Boundary, unchanged: None) -> None:
    """A few KiB of handle carrying a zstd batch of 40M rows: refused on its signature alone."""
    sink = pa.BufferOutputStream()
    big = pa.table({"p": pa.array([0] * 40_000_000, pa.int64())})
    with pa.ipc.new_stream(sink, big.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(big, max_chunksize=40_000_000)
    payload = base64.b64encode(sink.getvalue().to_pybytes()).decode()
    del big, sink
    assert len(payload) < 200_000
    body = json.dumps({"q": "SELECT ? AS x", "s": None, "t": [], "v": payload}).encode()
    rss = _rss_kib(boundary.proc)
    for handle in (b"icefloe.stmt.v1:" + body, b"icefloe.stmt.v2:" + b"B" * 43 + b":" + body):
        _refused(boundary.do_get_handle, handle)
    assert _rss_kib(boundary.proc) - rss < 50 * 1024


def test_too_many_bound_parameters_are_refused_as_they_arrive(boundary: Boundary, unchanged: None) -> None:
    handle = _create_prepared(boundary, "SELECT ? AS x")
    batch = pa.record_batch({"p": pa.array(range(50_000), pa.int64())})
    writer, reader = boundary.client.do_put(_prepared_query(handle), batch.schema)
    rss = _rss_kib(boundary.proc)

    def put() -> None:
        for _ in range(400):  # 20M rows if nothing stopped it
            writer.write_batch(batch)
        writer.done_writing()
        reader.read()
        writer.close()

    message = _refused(put)
    assert "too many parameter values" in message or "INVALID_ARGUMENT" in message or "Invalid" in message
    assert _rss_kib(boundary.proc) - rss < 200 * 1024


def _rss_kib(proc: ServerProcess) -> int:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- 2. the temp folder, the spill folder and the WAL name ------------------------------------

FILE_FUNCTIONS = [
    "SELECT * FROM glob('{p}')",
    "SELECT * FROM read_text('{p}')",
    "SELECT * FROM read_blob('{p}')",
    "SELECT * FROM read_csv('{p}')",
    "SELECT * FROM read_csv_auto('{p}')",
    "SELECT * FROM read_json('{p}')",
    "SELECT * FROM read_parquet('{p}')",
    "SELECT * FROM parquet_metadata('{p}')",
    "SELECT * FROM sniff_csv('{p}')",
    "SELECT * FROM '{p}'",
    "SELECT * FROM query('SELECT * FROM read_text(''{p}'')')",
    "SELECT * FROM query_table('{p}')",
    "WITH x AS (SELECT 1) SELECT * FROM read_text('{p}')",
    "SELECT (SELECT content FROM read_text('{p}')) AS c",
    "EXPLAIN ANALYZE SELECT * FROM read_text('{p}')",
]


def test_no_file_function_reaches_temp_spill_or_wal(boundary: Boundary, unchanged: None) -> None:
    spill_file = boundary.spill / "planted.csv"
    spill_file.write_text(f"a\n{SECRET}\n")
    try:
        paths = [".tmp/*", ".tmp/spilled.csv", str(boundary.cwd / ".tmp" / "spilled.csv"), ":memory:.wal",
                 str(boundary.cwd / ":memory:.wal"), str(boundary.spill / "*"), str(spill_file),
                 str(boundary.spill) + "/../*", "../cwd/.tmp/spilled.csv"]
        for template in FILE_FUNCTIONS:
            for path in paths:
                sql = template.format(p=path.replace("'", "''"))
                message = _refused(boundary.rows, sql)
                assert SECRET not in message, sql
                assert str(boundary.spill) not in message and str(boundary.cwd) not in message, (sql, message)
    finally:
        spill_file.unlink()


def test_large_sorts_still_spill(tmp_path: Path) -> None:
    """The private spill folder is really used: a sort far over the memory limit completes, and
    DuckDB's spill files appear in the server's folder (not in its working directory)."""
    warehouse = tmp_path / "warehouse"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = ServerProcess(warehouse, ["--memory-limit", "48MB", "--query-timeout", "120"], cwd=cwd).start()
    try:
        spill = Path(re.search(r"DuckDB spills to (\S+)", proc.log).group(1))  # type: ignore[union-attr]
        assert spill.stat().st_mode & 0o077 == 0 and not str(spill).startswith(str(cwd))
        client = flight.FlightClient(proc.location)
        sql = ("SELECT i, md5(i::VARCHAR) || md5((i + 1)::VARCHAR) AS h FROM range(3000000) t(i) "
               "ORDER BY h LIMIT 1 OFFSET 2999999")
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        seen = 0
        done = False
        deadline = time.monotonic() + 120
        import threading

        result: list[pa.Table] = []

        def read() -> None:
            # DoGet itself may run the whole sort: the server reads a result's first batches
            # before it answers (the query log's read-ahead), so watch from before the call.
            result.append(client.do_get(info.endpoints[0].ticket).read_all())

        t = threading.Thread(target=read)
        t.start()
        while t.is_alive() and time.monotonic() < deadline:
            seen = max(seen, sum(1 for p in spill.rglob("*") if p.is_file()))
            time.sleep(0.02)
        t.join()
        done = bool(result)
        assert done and result[0].num_rows == 1
        assert seen > 0, "no spill file appeared"
        assert not (cwd / ".tmp").exists()
        client.close()
    finally:
        proc.stop()
    assert not spill.exists(), "the spill folder is removed when the server stops"


# -- 3. AT (...) through DuckDB's parser ------------------------------------------------------


def test_at_clause_injection_through_a_table_name(boundary: Boundary, tmp_path: Path) -> None:
    """A legal quoted name holding ``=>`` and ``)`` is a name, never part of the AT expression."""
    from catalog import RocksCatalog

    evil = "x => 1)) AS BIGINT); ATTACH ':memory:' AS pwned; SELECT ((1"
    warehouse = tmp_path / "warehouse"
    cat = RocksCatalog("t", warehouse=str(warehouse))
    cat.create_namespace("ns")
    table = cat.create_table(("ns", evil), pa.schema([pa.field("v", pa.int64())]))
    table.append(pa.table({"v": pa.array([1], pa.int64())}))
    table = cat.load_table(("ns", evil))
    first = table.metadata.current_snapshot().snapshot_id  # type: ignore[union-attr]
    table.append(pa.table({"v": pa.array([2], pa.int64())}))
    cat.close()
    proc = ServerProcess(warehouse).start()
    try:
        client = flight.FlightClient(proc.location)
        quoted = '"' + evil.replace('"', '""') + '"'
        sql = f"SELECT v FROM ns.{quoted} AT (VERSION => {first}) ORDER BY v"
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        assert client.do_get(info.endpoints[0].ticket).read_all().column("v").to_pylist() == [1]
        sql = f"SELECT count(*) AS n FROM ns.{quoted}"
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        assert client.do_get(info.endpoints[0].ticket).read_all().column("n").to_pylist() == [2]
        client.close()
    finally:
        proc.stop()


def test_at_clause_injection_leaves_the_engine_untouched(tmp_path: Path) -> None:
    """In-process, where the parser database can be inspected: nothing ran but the lookup."""
    from catalog import RocksCatalog
    from flight_server.engine import Engine

    evil = "y => 1)) AS BIGINT); ATTACH ':memory:' AS pwned; SELECT ((1"
    cat = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    cat.create_namespace("ns")
    table = cat.create_table(("ns", evil), pa.schema([pa.field("v", pa.int64())]))
    table.append(pa.table({"v": pa.array([7], pa.int64())}))
    snap = cat.load_table(("ns", evil)).metadata.current_snapshot().snapshot_id  # type: ignore[union-attr]
    engine = Engine(cat, query_timeout_s=5)
    try:
        quoted = '"' + evil.replace('"', '""') + '"'
        sql, pins = engine.plan(f"SELECT v FROM ns.{quoted} AT (VERSION => {snap})", None)
        assert engine.query_table(sql, pins, None).column("v").to_pylist() == [7]
        names = {r[0] for r in engine._parser.admin.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        assert "pwned" not in names
    finally:
        engine.close()
        cat.close()


@pytest.mark.parametrize("expr", [
    "(SELECT max(i) FROM range(2000000000) t(i))",
    "(SELECT count(*) FROM range(10) a, range(10) b)",
    "id",
    "?",
    "current_setting('temp_directory')",
    "hash(1) + (SELECT 1)",
    "CAST((SELECT 1) AS BIGINT)",
    "read_text('x')",
])
def test_at_clause_takes_only_constant_expressions(boundary: Boundary, unchanged: None, expr: str) -> None:
    start = time.monotonic()
    message = _refused(boundary.info, f"SELECT * FROM sales.orders AT (VERSION => {expr})")
    assert time.monotonic() - start < 2.5, "refused without evaluating it"
    assert "AT (VERSION" in message or "not allowed" in message


def test_constant_at_expressions_still_work(boundary: Boundary) -> None:
    table = boundary.rows("SELECT count(*) AS n FROM sales.orders AT (TIMESTAMP => now() - INTERVAL 1 second)")
    assert table.column("n").to_pylist() == [4]
    when = "CAST('2100-01-01 00:00:00' AS TIMESTAMPTZ) - INTERVAL '1 hour' + INTERVAL 2 minute"
    assert boundary.rows(f"SELECT count(*) AS n FROM sales.orders AT (TIMESTAMP => {when})").column("n")[0].as_py() == 4


# -- 4. nothing about the server leaves -------------------------------------------------------

REVEALING = [
    "SELECT current_setting('temp_directory') AS x",
    "SELECT current_setting('secret_directory') AS x",
    "SELECT current_setting('allowed_directories') AS x",
    "SELECT current_setting('allowed_paths') AS x",
    "SELECT current_setting('home_directory') AS x",
    "SELECT current_setting('extension_directory') AS x",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM which_secret('s3://b/k', 's3')",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM duckdb_temporary_files()",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM duckdb_settings",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT * FROM system.main.duckdb_settings()",
    "SELECT getvariable('x') AS x",
    "SELECT * FROM nope",
    "SELECT * FROM sales.nope",
    "SELECT * FROM sqlite_temp_schema",
    "SHOW TABLES",
    "SHOW ALL TABLES",
    "SELECT database_list() AS x",
]


@pytest.mark.parametrize("sql", REVEALING)
def test_no_server_detail_in_answers_or_errors(boundary: Boundary, unchanged: None, sql: str) -> None:
    message = _refused(boundary.rows, sql)
    home = os.path.expanduser("~")
    for secret in (home, str(boundary.cwd), str(boundary.spill), str(boundary.proc.warehouse), ".duckdb/", "/tmp/"):
        assert secret not in message, (sql, secret, message)
    lowered = message.lower().split("line 1:")[0]  # the excerpt of the client's own SQL may name them
    for hint in INTERNAL_HINTS:
        assert f'did you mean "{hint}' not in lowered and f"mean {hint}" not in lowered, (sql, message)


def test_missing_table_suggests_an_icefloe_table(boundary: Boundary) -> None:
    message = _refused(boundary.rows, "SELECT * FROM sales.order")
    assert "sales.orders" in message and "pg_" not in message


# -- 5. the watchdog ---------------------------------------------------------------------------


def test_timeout_still_holds_after_cancelled_streams(boundary: Boundary) -> None:
    for _ in range(6):
        reader = boundary.client.do_get(boundary.info("SELECT i FROM range(200000000) t(i)").endpoints[0].ticket)
        reader.read_chunk()
        reader.cancel()
    start = time.monotonic()
    _refused(boundary.rows, "SELECT count(*) FROM range(20000000000) a(i) WHERE i % 7 = 3")
    assert time.monotonic() - start < 20, "the 3 s query timeout was not enforced"


def test_watchdog_survives_interrupting_a_closed_cursor(tmp_path: Path) -> None:
    """In-process: a query whose cursor closed just before its interrupt must not end the watchdog."""
    from catalog import RocksCatalog
    from flight_server import errors
    from flight_server.engine import Engine
    from flight_server.engine.watchdog import Running

    cat = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    engine = Engine(cat, query_timeout_s=1)
    try:
        slot = engine.slots.take()
        cursor = slot.cursor()
        cursor.close()
        stale = Running(slot, cursor, None, deadline=0.0)
        stale.pooled = False
        engine.watchdog.add(stale)
        time.sleep(0.5)
        assert engine.watchdog.is_alive() and stale.interrupted == "timeout"
        engine.watchdog.remove(stale)
        sql, pins = engine.plan("SELECT count(*) FROM range(20000000000) a(i) WHERE i % 7 = 3", None)
        start = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            engine.query_table(sql, pins, None)
        assert time.monotonic() - start < 10
    finally:
        engine.close()
        cat.close()


# -- 6. bounded work and precise codes ----------------------------------------------------------


def test_huge_in_list_is_bounded_by_the_timeout(boundary: Boundary, unchanged: None) -> None:
    values = ",".join(str(i) for i in range(150_000))
    sql = f"SELECT * FROM sales.orders WHERE id IN ({values})"
    assert len(sql) > 900_000
    start = time.monotonic()
    try:
        boundary.rows(sql)
    except (flight.FlightError, pa.ArrowException) as exc:
        assert "Traceback" not in str(exc)
    # A hang guard, not a speed check (timing assertions stay out of tests): planning this
    # 900 KB statement takes 8-13 s on a quiet 2-core machine, outside --query-timeout (3 s
    # here), which bounds execution only; the former 15 s bound failed CI at load.
    assert time.monotonic() - start < 60, "a huge statement must end, not hang the call"
    too_long = "SELECT 1 AS x WHERE 1 IN (" + ",".join(["1"] * 600_000) + ")"
    assert "too long" in _refused(boundary.info, too_long)


def test_update_extensions_is_invalid_argument(boundary: Boundary, unchanged: None) -> None:
    with pytest.raises(pa.ArrowInvalid, match="not allowed"):
        boundary.info("UPDATE EXTENSIONS")


@pytest.mark.parametrize("grace", ["-1", "NaN", "1e400", "Infinity", "true", '"soon"', "[1]"])
def test_orphan_grace_must_be_a_finite_number(boundary: Boundary, unchanged: None, grace: str) -> None:
    body = ('{"table": "sales.orders", "orphan_grace_s": ' + grace + "}").encode()
    with pytest.raises(pa.ArrowInvalid, match="orphan_grace_s"):
        list(boundary.client.do_action(flight.Action("icefloe.maintain", body)))


def _raw_do_put(boundary: Boundary, messages: list[bytes]) -> grpc.RpcError:
    """DoPut as raw FlightData messages (bytes no Arrow library would write)."""
    port = boundary.proc.location.rsplit(":", 1)[1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream("/arrow.flight.protocol.FlightService/DoPut",
                                     request_serializer=lambda m: m, response_deserializer=lambda m: m)
        with pytest.raises(grpc.RpcError) as info:
            list(call(iter(messages), timeout=20))
    return info.value


def _flight_data(descriptor: bytes | None, header: bytes, body: bytes = b"") -> bytes:
    out = field_bytes(1, descriptor) if descriptor is not None else b""
    out += field_bytes(2, header)
    if body:
        out += field_bytes(1000, body)
    return out


def _ipc_messages(table: pa.Table) -> list[pa.ipc.Message]:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    return list(reader)


def test_garbage_parameters_are_invalid_argument(boundary: Boundary, unchanged: None) -> None:
    """A valid schema, then bytes that are no record batch: refused by the bind path."""
    handle = _create_prepared(boundary, "SELECT ? AS x")
    descriptor = field_varint(1, 2) + field_bytes(2, any_of("CommandPreparedStatementQuery", field_bytes(1, handle)))
    schema_msg, batch_msg = _ipc_messages(pa.table({"p": pa.array([1, 2], pa.int64())}))
    header = batch_msg.metadata.to_pybytes()
    for later in ([_flight_data(None, header, os.urandom(3))],
                  [_flight_data(None, b"\x10\x00\x00\x00" + os.urandom(28), os.urandom(64))]):
        error = _raw_do_put(boundary, [_flight_data(descriptor, schema_msg.metadata.to_pybytes()), *later])
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
        assert "Traceback" not in (error.details() or "")


@pytest.mark.xfail(strict=True, reason="pyarrow's C++ DoPut refuses an unparsable FIRST message before any "
                   "Python handler runs, with UNKNOWN 'Invalid flatbuffers message.' (not reachable from icefloe)")
def test_garbage_first_message_is_invalid_argument(boundary: Boundary) -> None:
    handle = _create_prepared(boundary, "SELECT ? AS x")
    descriptor = field_varint(1, 2) + field_bytes(2, any_of("CommandPreparedStatementQuery", field_bytes(1, handle)))
    error = _raw_do_put(boundary, [_flight_data(descriptor, b"\x00garbage-not-a-flatbuffer")])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_corrupt_doput_record_batch_is_invalid_argument(boundary: Boundary, unchanged: None) -> None:
    schema_msg, batch_msg = _ipc_messages(pa.table({"id": pa.array([9, 9, 9], pa.int64()),
                                                    "customer": ["x", "y", "z"], "amount": [1.0, 2.0, 3.0]}))
    descriptor = field_varint(1, 1) + field_bytes(3, b"sales") + field_bytes(3, b"orders")
    body = batch_msg.body.to_pybytes()
    for bad_body in (body[: len(body) // 2], b"\xff" * len(body)):
        error = _raw_do_put(boundary, [
            _flight_data(descriptor, schema_msg.metadata.to_pybytes()),
            _flight_data(None, batch_msg.metadata.to_pybytes(), bad_body),
        ])
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
        assert "nothing was committed" in (error.details() or "") or "Traceback" not in (error.details() or "")


def test_a_slot_left_changed_is_discarded_not_reused(tmp_path: Path) -> None:
    """Third wall: whatever changed a slot (here, done behind the policy's back), the next
    query never sees it: the slot is checked after every query and dropped."""
    from catalog import RocksCatalog
    from flight_server.engine import Engine

    cat = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    engine = Engine(cat, query_timeout_s=5, max_concurrent=1)
    try:
        sql, pins = engine.plan("SELECT 1 AS x", None)
        assert engine.query_table(sql, pins, None).column("x").to_pylist() == [1]
        slot = engine.slots.take()
        assert slot.pristine()
        slot.db.execute("ATTACH ':memory:' AS leftover")
        assert not slot.pristine()
        engine.slots.give_back(slot, [], suspect=True)  # as after a query that changed it
        fresh = engine.slots.take()
        assert fresh is not slot and fresh.pristine()
        names = {r[0] for r in fresh.admin.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        assert "leftover" not in names
    finally:
        engine.close()
        cat.close()


def test_column_definitions_cannot_smuggle_a_statement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CREATE TABLE's column texts are parsed in a scratch DuckDB: one statement, no temp folder."""
    from flight_server import errors
    from flight_server.sqlwrite.types import schema_from_column_defs

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    for smuggled in ["a INT); COPY (SELECT 1 AS x) TO '.tmp/evil.csv'; CREATE TABLE z (b INT",
                     "a INT); ATTACH ':memory:' AS p; CREATE TABLE z (b INT"]:
        with pytest.raises(errors.InvalidArgument, match="bad column definition"):
            schema_from_column_defs([smuggled])
    assert list((tmp_path / ".tmp").iterdir()) == []
    assert [f.name for f in schema_from_column_defs(["a INT NOT NULL", "b VARCHAR"]).fields] == ["a", "b"]
