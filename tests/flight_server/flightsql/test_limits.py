"""Cancellation, query timeout and the concurrent-query cap, with a raw pyarrow.flight client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_samples import make_sample_warehouse
from flightsql_wire import statement_query
from servers import ServerProcess

ENDLESS = "SELECT * FROM range(100000000000) t(i)"
SLOW_AGGREGATE = "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One query at a time, 3 s timeout: a query that kept its slot would block the next one."""
    warehouse = tmp_path_factory.mktemp("limits") / "warehouse"
    make_sample_warehouse(warehouse)
    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:  # a table whose scan is several batches: more than the server reads ahead at DoGet
        cat.create_table("sales.many", pa.schema([pa.field("id", pa.int64())])).append(
            pa.table({"id": pa.array(range(1_000_000), pa.int64())}))
    finally:
        cat.close()
    proc = ServerProcess(warehouse, ["--query-timeout", "3", "--max-concurrent-queries", "1"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def start(
    client: flight.FlightClient, sql: str, options: flight.FlightCallOptions | None = None
) -> flight.FlightStreamReader:
    info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
    return client.do_get(info.endpoints[0].ticket, options=options)


def select_one(client: flight.FlightClient) -> int:
    return int(start(client, "SELECT 1 AS x").read_all().column("x")[0].as_py())


def test_cancel_mid_stream_frees_the_query(limited: ServerProcess) -> None:
    client = flight.FlightClient(limited.location)
    reader = start(client, ENDLESS)
    first = reader.read_chunk()
    assert first.data.num_rows > 0
    reader.cancel()
    # With a cap of one query, this only runs if the cancelled query gave its DuckDB slot back.
    assert select_one(client) == 1
    client.close()


def test_client_deadline_interrupts_duckdb(limited: ServerProcess) -> None:
    client = flight.FlightClient(limited.location)
    with pytest.raises(flight.FlightTimedOutError):
        start(client, SLOW_AGGREGATE, flight.FlightCallOptions(timeout=1.0)).read_all()
    deadline = time.monotonic() + 10
    while "interrupting query (cancelled)" not in limited.log and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "interrupting query (cancelled)" in limited.log
    assert select_one(client) == 1
    client.close()


def test_query_timeout_is_deadline_exceeded(limited: ServerProcess) -> None:
    client = flight.FlightClient(limited.location)
    with pytest.raises(flight.FlightTimedOutError) as info:
        start(client, SLOW_AGGREGATE).read_all()
    assert "exceeded the 3s timeout" in str(info.value)
    assert "Traceback" not in str(info.value)
    assert select_one(client) == 1
    client.close()


def test_concurrent_query_cap(limited: ServerProcess) -> None:
    client = flight.FlightClient(limited.location)
    holder = start(client, ENDLESS)
    holder.read_chunk()
    with pytest.raises(flight.FlightError) as info:
        start(client, "SELECT 2").read_all()
    assert "too many concurrent queries" in str(info.value)
    holder.cancel()
    assert select_one(client) == 1
    client.close()


def test_a_streaming_query_over_a_table_holds_its_slot_to_the_end(limited: ServerProcess) -> None:
    """A result over a table is cast to the schema clients read (column origins, NOT NULL):
    the query keeps its DuckDB slot until its stream ends. The cast was made around the
    engine's reader, which was then dropped: the query ended there, its slot (and kept cursor)
    went to the next query while the stream still read from it, and under concurrent clients
    queries failed with DuckDB's "connection is busy with another call"."""
    client = flight.FlightClient(limited.location)
    full = start(client, "SELECT id FROM sales.many").read_all()  # alone, it streams whole
    assert full.num_rows == 1_000_000 and full.column("id").to_pylist()[-1] == 999_999
    # Far more than gRPC's windows hold (1M rows of 2 KB): the server stays inside the stream.
    holder = start(client, "SELECT id, repeat('x', 2000) AS pad FROM sales.many")
    first = holder.read_chunk().data
    assert first.num_rows > 0
    assert first.schema.field("id").metadata  # annotated (column origins): the reader was cast
    with pytest.raises(flight.FlightError) as info:
        start(client, "SELECT count(*) FROM sales.orders").read_all()
    assert "too many concurrent queries" in str(info.value)
    holder.cancel()  # (past the 3 s query timeout by now)
    assert select_one(client) == 1
    client.close()


def test_streams_large_results_without_buffering(limited: ServerProcess) -> None:
    """50M rows (400 MB as int64) stream through; the server never materializes the result."""
    client = flight.FlightClient(limited.location)
    reader = start(client, "SELECT i FROM range(50000000) t(i)")
    rows = 0
    for chunk in reader:
        rows += chunk.data.num_rows
    assert rows == 50_000_000
    client.close()


def test_restart_keeps_tickets_valid(tmp_path: Path) -> None:
    """Tickets are stateless and pinned: a new server instance serves them, at the old snapshot."""
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    make_sample_warehouse(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        client = flight.FlightClient(proc.location)
        info = client.get_flight_info(
            flight.FlightDescriptor.for_command(statement_query("SELECT count(*) AS n FROM sales.orders"))
        )
        ticket = info.endpoints[0].ticket
        client.close()
        proc.stop()
        cat = RocksCatalog("t", warehouse=str(warehouse))
        orders = cat.load_table("sales.orders")
        orders.append(orders.scan().to_arrow().slice(0, 1))
        cat.close()
        proc.start()
        client = flight.FlightClient(proc.location)
        assert client.do_get(ticket).read_all().column("n").to_pylist() == [4]
        fresh = start(client, "SELECT count(*) AS n FROM sales.orders").read_all()
        assert fresh.column("n").to_pylist() == [5]
        client.close()
    finally:
        proc.stop()


def test_ticket_for_an_expired_snapshot_is_failed_precondition(tmp_path: Path) -> None:
    """A ticket pinned to a snapshot that expiry removed: a clear error naming the cause."""
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    make_sample_warehouse(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        client = flight.FlightClient(proc.location)
        info = client.get_flight_info(
            flight.FlightDescriptor.for_command(statement_query("SELECT count(*) AS n FROM sales.orders"))
        )
        client.close()
        proc.stop()
        cat = RocksCatalog("t", warehouse=str(warehouse))
        orders = cat.load_table("sales.orders")
        with orders.transaction() as tx:
            tx.set_properties({"icefloe.snapshots.retain": "1"})
        orders = cat.load_table("sales.orders")
        orders.append(orders.scan().to_arrow().slice(0, 1))
        assert len(cat.load_table("sales.orders").metadata.snapshots) == 1
        cat.close()
        proc.start()
        client = flight.FlightClient(proc.location)
        with pytest.raises(pa.ArrowInvalid) as err:  # FAILED_PRECONDITION is sent as INVALID_ARGUMENT
            client.do_get(info.endpoints[0].ticket).read_all()
        assert "FAILED_PRECONDITION" in str(err.value) and "no longer exists" in str(err.value)
        assert "Traceback" not in str(err.value)
        client.close()
    finally:
        proc.stop()


def test_sigterm_ends_running_streams(tmp_path: Path) -> None:
    """Clients reading an endless result or waiting on a long aggregate must not keep the server
    from stopping: shutdown interrupts their DuckDB work and their calls end with an error.

    (A client that stops reading but keeps its connection open is another matter: its stream
    waits on gRPC flow control, and pyarrow offers no shutdown deadline to cut it off.)
    """
    warehouse = tmp_path / "warehouse"
    make_sample_warehouse(warehouse)
    proc = ServerProcess(warehouse).start()
    client = flight.FlightClient(proc.location)
    outcome: list[BaseException] = []

    def run(sql: str) -> None:
        try:
            for _ in start(client, sql, flight.FlightCallOptions(timeout=120)):
                pass
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions below
            outcome.append(exc)

    workers = [threading.Thread(target=run, args=(sql,)) for sql in (ENDLESS, SLOW_AGGREGATE)]
    for worker in workers:
        worker.start()
    time.sleep(1.5)  # both queries are running in DuckDB by now
    code = proc.stop()
    for worker in workers:
        worker.join(30)
    assert code == 0, proc.log  # exited by itself, not killed after the 30 s grace period
    assert proc.log.count("interrupting query (shutdown)") == 2
    assert "icefloe stopped" in proc.log
    assert len(outcome) == 2 and not any("Traceback" in str(e) for e in outcome)
    client.close()


def test_ticket_snapshot_survives_commits_while_pinned(tmp_path: Path) -> None:
    """Commits after GetFlightInfo expire old snapshots, but never the one a live ticket reads."""
    warehouse = tmp_path / "warehouse"
    make_sample_warehouse(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        client = flight.FlightClient(proc.location)
        count_sql = "SELECT count(*) AS n FROM sales.orders"
        before = client.do_get(
            client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(count_sql))).endpoints[0].ticket
        ).read_all().column("n")[0].as_py()
        client.do_get(client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(
            "ALTER TABLE sales.orders SET (\"icefloe.snapshots.retain\" = '1')"))).endpoints[0].ticket).read_all()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(count_sql)))
        for _ in range(3):  # each INSERT commits a snapshot; retain=1 would expire the pinned one
            client.do_get(client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(
                "INSERT INTO sales.orders SELECT * FROM sales.orders LIMIT 1"))).endpoints[0].ticket).read_all()
        assert client.do_get(info.endpoints[0].ticket).read_all().column("n")[0].as_py() == before
        fresh = client.do_get(
            client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(count_sql))).endpoints[0].ticket
        ).read_all().column("n")[0].as_py()
        assert fresh == before + 3
        client.close()
    finally:
        proc.stop()
    assert "Traceback" not in proc.log
