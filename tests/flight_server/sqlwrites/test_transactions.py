"""Transactions across tables over Flight SQL: writes to two tables land together or not at all.

Driven by ADBC (``autocommit=False``: BeginTransaction, commands carrying the transaction id,
EndTransaction) exactly as applications use it, and by plain pyarrow.flight for the protocol
edges (signed ids, foreign principals, expiry). A second connection checks visibility.

The tests marked ``ON_BOTH_STORAGES`` also run over an S3 warehouse (the module's server once per
storage): a transaction's staged files are objects until the one commit, or never referenced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from servers import ServerProcess
from sqlwrites_lib import log_head, log_records, scalar, update
from storage_kinds import Warehouse, fresh_warehouse, open_catalog, start_server

from flight_server.flightsql import protocol as p

ON_BOTH_STORAGES = pytest.mark.parametrize("txn_storage", ["local", "s3"], indirect=True)
# The other tests on the module's server name the local parameter, so they share its one server.
LOCAL = pytest.mark.parametrize("txn_storage", ["local"], indirect=True)


@pytest.fixture(scope="module")
def txn_storage(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="module")
def txn_warehouse(txn_storage: str, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Warehouse:
    return fresh_warehouse(txn_storage, tmp_path_factory.mktemp("txn"), request)


@pytest.fixture(scope="module")
def txn_server(txn_warehouse: Warehouse) -> Iterator[ServerProcess]:
    proc = start_server(txn_warehouse, ["--transaction-timeout", "3"]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def other(txn_server: ServerProcess) -> Iterator[Any]:
    """A second client, committing each statement on its own."""
    conn = fsql.connect(txn_server.location, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def reader_catalog(txn_server: ServerProcess, txn_warehouse: Warehouse) -> Iterator[Any]:
    cat = open_catalog(txn_warehouse, "reader", read_only=True)
    try:
        yield cat
    finally:
        cat.close()


def _tables(conn: Any, ns: str) -> None:
    update(conn, f"CREATE SCHEMA IF NOT EXISTS {ns}")
    update(conn, f"CREATE TABLE {ns}.orders (id BIGINT NOT NULL, amount BIGINT)")
    update(conn, f"CREATE TABLE {ns}.ledger (id BIGINT NOT NULL, note VARCHAR)")


def _counts(conn: Any, ns: str) -> tuple[int, int]:
    return (scalar(conn, f"SELECT count(*) FROM {ns}.orders"), scalar(conn, f"SELECT count(*) FROM {ns}.ledger"))


def _exec(conn: Any, text: str) -> None:
    with conn.cursor() as cur:
        cur.execute(text)


@LOCAL
def test_sqlinfo_advertises_transactions(txn_server: ServerProcess) -> None:
    conn = fsql.connect(txn_server.location)
    try:
        info = conn.adbc_get_info()
        assert conn.adbc_connection.get_option("adbc.connection.autocommit") == "false"
    finally:
        conn.close()
    assert info["vendor_name"] == "icefloe"
    client = flight.connect(txn_server.location)
    cmd = p.CommandGetSqlInfo(info=[8, 563]).pack()
    fi = client.get_flight_info(flight.FlightDescriptor.for_command(cmd))
    table = client.do_get(fi.endpoints[0].ticket).read_all()
    values = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
    assert values == {8: 1, 563: True}  # SQL_TRANSACTION_TRANSACTION; transactions supported


@ON_BOTH_STORAGES
def test_commit_lands_both_tables_at_once_with_one_transaction_id(
    txn_server: ServerProcess, other: Any, reader_catalog: Any
) -> None:
    _tables(other, "t1")
    head = log_head(reader_catalog)
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO t1.orders VALUES (1, 10), (2, 20)")
        _exec(conn, "INSERT INTO t1.ledger VALUES (1, 'paid')")
        _exec(conn, "UPDATE t1.orders SET amount = amount + 1 WHERE id = 2")  # on its own staged rows
        _exec(conn, "DELETE FROM t1.orders WHERE id = 1")
        # Not visible elsewhere before COMMIT; nothing on the commit log either.
        assert _counts(other, "t1") == (0, 0)
        assert log_records(reader_catalog, head) == []
        conn.commit()
    finally:
        conn.close()
    assert _counts(other, "t1") == (1, 1)
    assert scalar(other, "SELECT amount FROM t1.orders") == 21
    records = log_records(reader_catalog, head)
    assert sorted(r.table for r in records) == ["ledger", "orders"]
    assert records[1].seq == records[0].seq + 1  # one batch, one seq per table
    ids = {r.extra.get("transaction_id") for r in records}
    assert len(ids) == 1 and None not in ids
    by_table = {r.table: r for r in records}
    assert by_table["ledger"].added_rows == 1
    assert by_table["orders"].added_rows - by_table["orders"].deleted_rows == 1


@ON_BOTH_STORAGES
def test_rollback_lands_nothing(txn_server: ServerProcess, other: Any, reader_catalog: Any) -> None:
    _tables(other, "t2")
    head = log_head(reader_catalog)
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO t2.orders VALUES (1, 10)")
        _exec(conn, "INSERT INTO t2.ledger VALUES (1, 'x')")
        conn.rollback()
        assert _counts(other, "t2") == (0, 0)
        # The connection goes on in a new transaction.
        _exec(conn, "INSERT INTO t2.ledger VALUES (2, 'y')")
        conn.commit()
    finally:
        conn.close()
    assert _counts(other, "t2") == (0, 1)
    assert [r.table for r in log_records(reader_catalog, head)] == ["ledger"]


@LOCAL
def test_conflicting_commit_aborts_and_lands_nothing(
    txn_server: ServerProcess, other: Any, reader_catalog: Any
) -> None:
    _tables(other, "t3")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO t3.orders VALUES (1, 10)")
        _exec(conn, "INSERT INTO t3.ledger VALUES (1, 'x')")
        update(other, "INSERT INTO t3.ledger VALUES (99, 'concurrent')")  # lands first
        head = log_head(reader_catalog)
        with pytest.raises(adbc_driver_manager.Error) as info:
            conn.commit()
        assert "ABORTED" in str(info.value) or "changed by another commit" in str(info.value)
    finally:
        conn.close()
    assert _counts(other, "t3") == (0, 1)
    assert log_records(reader_catalog, head) == []


@ON_BOTH_STORAGES
def test_adbc_ingest_inside_a_transaction(txn_server: ServerProcess, other: Any) -> None:
    _tables(other, "t4")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest("orders", pa.table({"id": [1, 2, 3], "amount": [1, 2, 3]}), mode="append",
                            db_schema_name="t4")
            cur.adbc_ingest("ledger", pa.table({"id": [1], "note": ["a"]}), mode="append", db_schema_name="t4")
        assert _counts(other, "t4") == (0, 0)
        conn.commit()
    finally:
        conn.close()
    assert _counts(other, "t4") == (3, 1)


@LOCAL
def test_reads_in_a_transaction_are_repeatable_and_see_own_writes(
    txn_server: ServerProcess, other: Any
) -> None:
    _tables(other, "t5")
    update(other, "INSERT INTO t5.ledger VALUES (1, 'a')")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        assert scalar(conn, "SELECT count(*) FROM t5.ledger") == 1
        update(other, "INSERT INTO t5.ledger VALUES (2, 'b')")
        assert scalar(conn, "SELECT count(*) FROM t5.ledger") == 1  # the snapshot first seen
        _exec(conn, "INSERT INTO t5.orders VALUES (1, 1)")
        assert scalar(conn, "SELECT count(*) FROM t5.orders") == 1  # its own write
        assert scalar(other, "SELECT count(*) FROM t5.orders") == 0
        conn.rollback()
    finally:
        conn.close()


@LOCAL
def test_ddl_inside_a_transaction_lands_at_once_but_not_on_written_tables(
    txn_server: ServerProcess, other: Any
) -> None:
    _tables(other, "t6")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO t6.orders VALUES (1, 1)")
        # DDL is not part of the transaction (a default DB-API connection is always in one).
        _exec(conn, "CREATE TABLE t6.more (id BIGINT)")
        assert scalar(other, "SELECT count(*) FROM t6.more") == 0
        with pytest.raises(adbc_driver_manager.Error) as info:
            _exec(conn, "DROP TABLE t6.orders")
        assert "uncommitted writes in this transaction" in str(info.value)
        conn.commit()
    finally:
        conn.close()
    assert _counts(other, "t6") == (1, 0)


# -- the protocol, with pyarrow.flight ------------------------------------------------------


def _begin(client: flight.FlightClient) -> bytes:
    body = p.ActionBeginTransactionRequest().pack()
    result = list(client.do_action(flight.Action("BeginTransaction", body)))
    return p.ActionBeginTransactionResult.unpack(result[0].body.to_pybytes()).transaction_id


def _end(client: flight.FlightClient, tid: bytes, action: int) -> None:
    body = p.ActionEndTransactionRequest(transaction_id=tid, action=action).pack()
    list(client.do_action(flight.Action("EndTransaction", body)))


def _update(client: flight.FlightClient, sql: str, tid: bytes | None) -> int:
    cmd = p.CommandStatementUpdate(query=sql, transaction_id=tid).pack()
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(cmd), pa.schema([]))
    writer.done_writing()
    answer = reader.read()
    writer.close()
    return p.DoPutUpdateResult.decode(answer.to_pybytes()).record_count


@LOCAL
def test_altered_or_unsigned_transaction_ids_are_invalid_argument(txn_server: ServerProcess, other: Any) -> None:
    _tables(other, "t7")
    client = flight.connect(txn_server.location)
    tid = _begin(client)
    assert tid.startswith(b"icefloe.txn.")
    for bad in (b"not-a-transaction", tid[:-1] + bytes([tid[-1] ^ 1]), tid.replace(b"txn", b"stmt", 1)):
        with pytest.raises(pa.ArrowInvalid) as info:
            _update(client, "INSERT INTO t7.orders VALUES (1, 1)", bad)
        assert "INVALID_ARGUMENT:" in str(info.value) and "transaction id" in str(info.value)
    _update(client, "INSERT INTO t7.orders VALUES (1, 1)", tid)
    _end(client, tid, p.END_TRANSACTION_COMMIT)
    assert scalar(other, "SELECT count(*) FROM t7.orders") == 1
    with pytest.raises(pa.ArrowInvalid) as ended:
        _update(client, "INSERT INTO t7.orders VALUES (2, 2)", tid)
    assert str(ended.value).startswith("FAILED_PRECONDITION: transaction") and "is committed" in str(ended.value)


@LOCAL
def test_idle_transaction_expires(txn_server: ServerProcess, other: Any) -> None:
    _tables(other, "t8")
    client = flight.connect(txn_server.location)
    tid = _begin(client)
    _update(client, "INSERT INTO t8.orders VALUES (1, 1)", tid)
    time.sleep(4)  # --transaction-timeout 3
    with pytest.raises(pa.ArrowInvalid) as info:
        _end(client, tid, p.END_TRANSACTION_COMMIT)
    assert str(info.value).startswith("FAILED_PRECONDITION: transaction") and "expired" in str(info.value)
    assert scalar(other, "SELECT count(*) FROM t8.orders") == 0


@LOCAL
def test_sql_begin_commit_rollback(txn_server: ServerProcess, other: Any) -> None:
    _tables(other, "t9")
    conn = fsql.connect(txn_server.location, autocommit=True,
                        db_kwargs={"adbc.flight.sql.rpc.with_cookie_middleware": "true"})
    try:
        update(conn, "BEGIN")
        update(conn, "INSERT INTO t9.orders VALUES (1, 1)")
        update(conn, "INSERT INTO t9.ledger VALUES (1, 'a')")
        assert _counts(other, "t9") == (0, 0)
        update(conn, "COMMIT")
        assert _counts(other, "t9") == (1, 1)
        update(conn, "BEGIN TRANSACTION")
        update(conn, "INSERT INTO t9.orders VALUES (2, 2)")
        update(conn, "ROLLBACK")
        assert _counts(other, "t9") == (1, 1)
    finally:
        conn.close()


def test_kill_9_between_writes_and_commit_lands_nothing(tmp_path: Path) -> None:
    # Local only: ~40 s (the driver's commit waits out the dead server), and kill -9 on S3 is
    # covered by appends/test_crashes.py.
    proc = ServerProcess(tmp_path / "warehouse").start()
    try:
        setup = fsql.connect(proc.location, autocommit=True)
        _tables(setup, "k")
        setup.close()
        conn = fsql.connect(proc.location, autocommit=False)
        _exec(conn, "INSERT INTO k.orders VALUES (1, 1)")
        _exec(conn, "INSERT INTO k.ledger VALUES (1, 'a')")
        proc.kill()
        with pytest.raises(adbc_driver_manager.Error):
            conn.commit()
        conn.close()
        proc.start()
        check = fsql.connect(proc.location, autocommit=True)
        try:
            assert _counts(check, "k") == (0, 0)
        finally:
            check.close()
    finally:
        proc.stop()


def _feed_events(location: str, tables: list[str], count: int) -> list[dict[str, Any]]:
    """The first ``count`` commits.v1 events on ``tables``, from the start of the log."""
    client = flight.connect(location)
    request = {"feed": "commits.v1", "after": "earliest", "tables": tables, "heartbeat_ms": 200}
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
    writer.done_writing()
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    try:
        while len(events) < count and time.monotonic() < deadline:
            chunk = reader.read_chunk()
            if chunk.data is not None:
                events.extend(chunk.data.to_pylist())
    finally:
        for step in (reader.cancel, writer.close):  # the feed never ends by itself
            try:
                step()
            except Exception:  # closing a cancelled call reports the cancellation
                pass
        client.close()
    return events


@LOCAL
def test_feed_shows_each_table_commit_with_the_shared_transaction_id(txn_server: ServerProcess, other: Any) -> None:
    _tables(other, "tf")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        _exec(conn, "INSERT INTO tf.orders VALUES (1, 1)")
        _exec(conn, "INSERT INTO tf.ledger VALUES (1, 'a')")
        conn.commit()
    finally:
        conn.close()
    update(other, "INSERT INTO tf.ledger VALUES (2, 'b')")  # outside any transaction
    events = _feed_events(txn_server.location, ["tf.*"], 5)  # 2 creates, 2 in the transaction, 1 more
    appends = [e for e in events if e["operation"] == "append"]
    assert [(e["table"], e["added_rows"]) for e in appends] == [("orders", 1), ("ledger", 1), ("ledger", 1)] \
        or [(e["table"], e["added_rows"]) for e in appends] == [("ledger", 1), ("orders", 1), ("ledger", 1)]
    assert appends[0]["transaction_id"] is not None
    assert appends[0]["transaction_id"] == appends[1]["transaction_id"]
    assert appends[1]["seq"] == appends[0]["seq"] + 1
    assert appends[2]["transaction_id"] is None


@LOCAL
def test_idle_transaction_without_writes_goes_on_after_expiry(txn_server: ServerProcess, other: Any) -> None:
    """A default DB-API connection (autocommit off: always in a transaction) that idles past the
    timeout can still query, and then write and commit: nothing was staged, nothing was lost."""
    _tables(other, "t10")
    conn = fsql.connect(txn_server.location, autocommit=False)
    try:
        assert scalar(conn, "SELECT count(*) FROM t10.orders") == 0
        time.sleep(4)  # --transaction-timeout 3
        assert scalar(conn, "SELECT count(*) FROM t10.orders") == 0
        _exec(conn, "INSERT INTO t10.orders VALUES (1, 1)")
        conn.commit()
    finally:
        conn.close()
    assert scalar(other, "SELECT count(*) FROM t10.orders") == 1
