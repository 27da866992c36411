"""What a Flight SQL transaction reads (ADBC ``autocommit=False``, as applications use it):
every table as it was at BEGIN, whenever the transaction first touches it, plus its own
uncommitted writes (read-your-writes), which no other client sees until COMMIT."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pyarrow as pa
import pytest
from servers import ServerProcess
from sqlwrites_lib import scalar, update


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("txr") / "warehouse").start()
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


def _exec(conn: Any, sql: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql)


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        table: pa.Table = cur.fetch_arrow_table()
    return [tuple(row.values()) for row in table.to_pylist()]


def test_a_transaction_reads_its_own_writes(server: ServerProcess, other: Any) -> None:
    update(other, "CREATE SCHEMA IF NOT EXISTS ryw")
    update(other, "CREATE TABLE ryw.a (id BIGINT, name VARCHAR)")
    update(other, "CREATE TABLE ryw.b (id BIGINT)")
    update(other, "INSERT INTO ryw.a VALUES (1, 'one')")
    conn = fsql.connect(server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO ryw.a VALUES (2, 'two')")
        _exec(conn, "INSERT INTO ryw.b SELECT id * 10 FROM ryw.a")  # reads its own write of a
        assert _rows(conn, "SELECT id, name FROM ryw.a ORDER BY id") == [(1, "one"), (2, "two")]
        assert _rows(conn, "SELECT id FROM ryw.b ORDER BY id") == [(10,), (20,)]
        # A join of both written tables and a prepared statement with a parameter read them too.
        assert scalar(conn, "SELECT count(*) FROM ryw.a JOIN ryw.b ON a.id * 10 = b.id") == 2
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM ryw.a WHERE id = ?", parameters=(2,))
            assert cur.fetchall() == [("two",)]
        _exec(conn, "DELETE FROM ryw.a WHERE id = 1")
        assert _rows(conn, "SELECT id FROM ryw.a") == [(2,)]
        # Nobody else sees any of it before COMMIT.
        assert scalar(other, "SELECT count(*) FROM ryw.a") == 1
        assert scalar(other, "SELECT count(*) FROM ryw.b") == 0
        conn.commit()
    finally:
        conn.close()
    assert _rows(other, "SELECT id FROM ryw.a") == [(2,)]
    assert scalar(other, "SELECT count(*) FROM ryw.b") == 2


def test_rolled_back_writes_are_gone_for_the_transaction_too(server: ServerProcess, other: Any) -> None:
    update(other, "CREATE SCHEMA IF NOT EXISTS ryr")
    update(other, "CREATE TABLE ryr.t (id BIGINT)")
    conn = fsql.connect(server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO ryr.t VALUES (1), (2)")
        assert scalar(conn, "SELECT count(*) FROM ryr.t") == 2
        conn.rollback()
        assert scalar(conn, "SELECT count(*) FROM ryr.t") == 0
    finally:
        conn.close()
    assert scalar(other, "SELECT count(*) FROM ryr.t") == 0


def test_every_table_is_read_as_it_was_at_begin(server: ServerProcess, other: Any) -> None:
    update(other, "CREATE SCHEMA IF NOT EXISTS rb")
    update(other, "CREATE TABLE rb.first (id BIGINT)")
    update(other, "CREATE TABLE rb.second (id BIGINT)")
    update(other, "INSERT INTO rb.first VALUES (1)")
    update(other, "INSERT INTO rb.second VALUES (1)")
    conn = fsql.connect(server.location, autocommit=False)  # ADBC begins the transaction here
    try:
        # Another client commits to both tables after BEGIN, before this transaction touched
        # either: neither commit is visible, the first read included (a snapshot of the whole
        # catalog at BEGIN, not of each table at its first touch).
        update(other, "INSERT INTO rb.first VALUES (2)")
        update(other, "INSERT INTO rb.second VALUES (2)")
        assert scalar(conn, "SELECT count(*) FROM rb.first") == 1
        update(other, "INSERT INTO rb.second VALUES (3)")
        assert scalar(conn, "SELECT count(*) FROM rb.second") == 1
        assert scalar(conn, "SELECT count(*) FROM rb.first") == 1
        conn.commit()  # ends it; ADBC begins the next one: it sees everything committed so far
        assert scalar(conn, "SELECT count(*) FROM rb.second") == 3
    finally:
        conn.close()


def test_sql_begin_pins_at_begin_and_reads_own_writes(server: ServerProcess, other: Any) -> None:
    update(other, "CREATE SCHEMA IF NOT EXISTS sb")
    update(other, "CREATE TABLE sb.t (id BIGINT)")
    update(other, "CREATE TABLE sb.u (id BIGINT)")
    update(other, "INSERT INTO sb.t VALUES (1)")
    # SQL BEGIN needs a session: the ADBC connection's cookie keeps it.
    conn = fsql.connect(server.location, autocommit=True,
                        db_kwargs={"adbc.flight.sql.rpc.with_cookie_middleware": "true"})
    try:
        _exec(conn, "BEGIN")
        update(other, "INSERT INTO sb.t VALUES (2)")
        assert scalar(conn, "SELECT count(*) FROM sb.t") == 1
        _exec(conn, "INSERT INTO sb.u SELECT id + 10 FROM sb.t")
        assert _rows(conn, "SELECT id FROM sb.u ORDER BY id") == [(11,)]
        # Writing a table that changed since BEGIN would base the write on a state this
        # transaction does not see: refused at once, as the commit would be.
        with pytest.raises(adbc_driver_manager.Error) as info:
            _exec(conn, "INSERT INTO sb.t VALUES (3)")
        assert "ABORTED" in str(info.value) and "sb.t changed since this transaction" in str(info.value)
        _exec(conn, "ROLLBACK")
        assert _rows(conn, "SELECT id FROM sb.t ORDER BY id") == [(1,), (2,)]
        assert scalar(conn, "SELECT count(*) FROM sb.u") == 0
    finally:
        conn.close()


def test_a_ticket_of_own_writes_reads_them_then_the_catalog(server: ServerProcess, other: Any) -> None:
    import pyarrow.flight as flight

    from flight_server.flightsql import protocol as p

    update(other, "CREATE SCHEMA IF NOT EXISTS tk")
    update(other, "CREATE TABLE tk.t (id BIGINT)")
    client = flight.FlightClient(server.location)
    try:
        begun = list(client.do_action(flight.Action("BeginTransaction", p.ActionBeginTransactionRequest().pack())))
        tid = p.ActionBeginTransactionResult.unpack(begun[0].body.to_pybytes()).transaction_id
        put = p.CommandStatementUpdate(query="INSERT INTO tk.t VALUES (7)", transaction_id=tid).pack()
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(put), pa.schema([]))
        writer.done_writing()
        reader.read()
        writer.close()
        query = p.CommandStatementQuery(query="SELECT id FROM tk.t", transaction_id=tid).pack()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(query))
        assert client.do_get(info.endpoints[0].ticket).read_all().column("id").to_pylist() == [7]
        # Committed: the same ticket reads the snapshot, now in the catalog.
        end = p.ActionEndTransactionRequest(transaction_id=tid, action=p.END_TRANSACTION_COMMIT).pack()
        list(client.do_action(flight.Action("EndTransaction", end)))
        assert client.do_get(info.endpoints[0].ticket).read_all().column("id").to_pylist() == [7]
        # Rolled back: the ticket's snapshot never landed, and the ticket says so.
        begun = list(client.do_action(flight.Action("BeginTransaction", p.ActionBeginTransactionRequest().pack())))
        tid = p.ActionBeginTransactionResult.unpack(begun[0].body.to_pybytes()).transaction_id
        put = p.CommandStatementUpdate(query="INSERT INTO tk.t VALUES (8)", transaction_id=tid).pack()
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(put), pa.schema([]))
        writer.done_writing()
        reader.read()
        writer.close()
        query = p.CommandStatementQuery(query="SELECT id FROM tk.t", transaction_id=tid).pack()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(query))
        end = p.ActionEndTransactionRequest(transaction_id=tid, action=p.END_TRANSACTION_ROLLBACK).pack()
        list(client.do_action(flight.Action("EndTransaction", end)))
        with pytest.raises(pa.ArrowException) as gone:
            client.do_get(info.endpoints[0].ticket).read_all()
        assert str(gone.value).startswith("FAILED_PRECONDITION: snapshot") and "no longer exists" in str(gone.value)
    finally:
        client.close()


def test_a_statement_outside_a_transaction_sees_a_multi_table_commit_whole(server: ServerProcess, other: Any) -> None:
    """One statement naming two tables pins both from one moment of the catalog: while a
    writer commits transactions that insert one row into each of three tables, a reader with no transaction
    never counts a commit in one table and not in another."""
    import threading

    COUNTS = "SELECT (SELECT count(*) FROM torn.a), (SELECT count(*) FROM torn.b), (SELECT count(*) FROM torn.c)"
    update(other, "CREATE SCHEMA IF NOT EXISTS torn")
    update(other, "CREATE TABLE torn.a (id BIGINT)")
    update(other, "CREATE TABLE torn.b (id BIGINT)")
    update(other, "CREATE TABLE torn.c (id BIGINT)")
    done = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        conn = fsql.connect(server.location, autocommit=False)
        try:
            for k in range(30):
                for name in "abc":
                    _exec(conn, f"INSERT INTO torn.{name} VALUES ({k})")
                conn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)
        finally:
            conn.close()
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    seen = []
    try:
        while not done.is_set():
            seen.append(_rows(other, COUNTS)[0])
    finally:
        writer.join()
    assert not failures, failures
    torn = [counts for counts in seen if len(set(counts)) > 1]
    assert not torn, f"{len(torn)} of {len(seen)} reads saw one table's commit without the other's: {torn[:5]}"
    assert len({counts[0] for counts in seen}) > 3  # the reads did run while the commits landed
    assert _rows(other, COUNTS) == [(30, 30, 30)]
