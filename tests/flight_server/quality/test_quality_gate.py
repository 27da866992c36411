"""The quality gate on the write paths of a real server: DoPut, adbc_ingest, SQL INSERT.

Expectations are declared in SQL (``ALTER TABLE ... SET (...)``); each action is
checked for what it does to the client (status, message), to the table and to the quarantine
table, and for what it leaves in the commit log (the ``quality`` entry lineage and the feed read).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from servers import ServerProcess
from storage_kinds import open_catalog

from tests.flight_server.feed.feed_helpers import FeedReader

# What a refused DoPut raises in pyarrow.flight: INVALID_ARGUMENT arrives as ArrowInvalid, and
# FAILED_PRECONDITION too, its message starting with the code (flight_server.errors).
REFUSED = (flight.FlightError, pa.ArrowInvalid)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "warehouse").start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


@pytest.fixture
def conn(server: ServerProcess) -> Iterator[flight_sql.Connection]:
    # The session cookie kept: SQL BEGIN's transaction lives in the session.
    connection = flight_sql.connect(server.location, autocommit=True,
                                    db_kwargs={"adbc.flight.sql.rpc.with_cookie_middleware": "true"})
    try:
        yield connection
    finally:
        connection.close()


def sql(conn: flight_sql.Connection, text: str) -> list[tuple[object, ...]]:
    with conn.cursor() as cur:
        cur.execute(text)
        try:
            return list(cur.fetchall())
        except Exception:  # a statement without a result set
            return []


def orders(conn: flight_sql.Connection, **expect: str) -> None:
    sql(conn, "CREATE SCHEMA IF NOT EXISTS ns")
    sql(conn, "CREATE TABLE ns.orders (id BIGINT, amount DOUBLE, status VARCHAR)")
    if expect:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in expect.items())
        sql(conn, f"ALTER TABLE ns.orders SET ({props})")


BATCH = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "amount": [10.0, -5.0, None, 7.5],
                  "status": ["new", "new", "paid", "bogus"]})


def log_records(warehouse: Path, table: str) -> list[object]:
    cat = open_catalog(warehouse, "reader", read_only=True)
    try:
        return [r for r in cat.log.read(0) if r.qualified_name == table]
    finally:
        cat.close()


def test_block_refuses_the_append_naming_the_expectation_and_rows(server: ServerProcess,
                                                                 conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount > 0"})
    with pytest.raises(REFUSED) as raised:
        do_put(server.location, ("ns", "orders"), BATCH)
    message = str(raised.value)
    assert isinstance(raised.value, pa.ArrowInvalid)  # INVALID_ARGUMENT
    assert "'positive' (amount > 0) failed on 2 of 4 rows" in message
    assert '"id": 2' in message and '"id": 3' in message  # the sample names the failing rows
    assert "Traceback" not in message
    assert sql(conn, "SELECT count(*) FROM ns.orders") == [(0,)]
    # Good rows still go in.
    good = BATCH.filter(pa.array([True, False, False, True]))
    assert do_put(server.location, ("ns", "orders"), good)["rows"] == 2
    assert sql(conn, "SELECT id FROM ns.orders ORDER BY id") == [(1,), (4,)]


def test_quarantine_keeps_bad_rows_with_reason_in_the_same_batch(server: ServerProcess,
                                                                 conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount > 0",
                    "icefloe.expect.positive.on-failure": "quarantine",
                    "icefloe.expect.known_status": "status IN (''new'', ''paid'')",
                    "icefloe.expect.known_status.on-failure": "quarantine"})
    result = do_put(server.location, ("ns", "orders"), BATCH, key="quarantine-once")
    assert result["rows"] == 1
    assert sql(conn, "SELECT id FROM ns.orders") == [(1,)]
    bad = sql(conn, "SELECT json_extract(_row, '$.id')::BIGINT AS id, _expectation, _reason "
                    "FROM ns.orders__quarantine ORDER BY id")
    assert bad == [(2, "positive", "amount > 0"), (3, "positive", "amount > 0"),
                   (4, "known_status", "status IN ('new', 'paid')")]
    records = log_records(server.warehouse, "ns.orders")
    landed = [r for r in records if r.operation == "append"][-1]
    quarantined = [r for r in log_records(server.warehouse, "ns.orders__quarantine") if r.operation == "append"]
    # One RocksDB batch: consecutive seqs, and the quarantine commit names its target.
    assert [q.seq for q in quarantined] == [landed.seq + 1]
    # The writer is answered with the target's commit, not the quarantine's (a bug once).
    assert (result["commit_seq"], result["snapshot_id"]) == (landed.seq, landed.snapshot_id)
    # A retry with the same key is a duplicate of that commit: nothing lands twice.
    again = do_put(server.location, ("ns", "orders"), BATCH, key="quarantine-once")
    assert again["duplicate"] is True and again["commit_seq"] == landed.seq
    assert sql(conn, "SELECT count(*) FROM ns.orders__quarantine") == [(3,)]
    assert quarantined[0].extra["quarantine_of"] == "ns.orders"
    quality = landed.extra["quality"]
    assert quality["quarantined_rows"] == 3
    by_name = {a["name"]: a for a in quality["assertions"]}
    assert by_name["positive"]["failed_rows"] == 2 and by_name["known_status"]["failed_rows"] == 1
    append_ids = sql(conn, "SELECT DISTINCT _append_id FROM ns.orders__quarantine")
    assert append_ids == [(quality["append_id"],)]


def test_warn_lands_every_row_and_records_the_failure(server: ServerProcess, conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.unique_id": "unique(id)", "icefloe.expect.unique_id.on-failure": "warn"})
    twice = pa.concat_tables([BATCH, BATCH])
    assert do_put(server.location, ("ns", "orders"), twice, batch_rows=4)["rows"] == 8
    landed = [r for r in log_records(server.warehouse, "ns.orders") if r.operation == "append"][-1]
    (assertion,) = landed.extra["quality"]["assertions"]
    # The second batch repeats every key of the first: unique spans the whole append.
    assert assertion["failed_rows"] == 4 and assertion["success"] is False and assertion["kind"] == "unique"


def serve_with(tmp_path: Path, properties: dict[str, str]) -> ServerProcess:
    """A server over a warehouse whose ns.orders declares ``properties``, set offline (as an
    engine could over REST), so that SQL's own check when they are set does not stop them."""
    warehouse = tmp_path / "offline"
    cat = open_catalog(warehouse, "setup")
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.orders", BATCH.schema, properties=properties)
    finally:
        cat.close()
    return ServerProcess(warehouse).start()


def test_unusable_expectation_fails_every_write_path(tmp_path: Path) -> None:
    proc = serve_with(tmp_path, {"icefloe.expect.broken": "no_such_column > 0",
                                 "icefloe.expect.broken.on-failure": "warn"})
    try:
        with pytest.raises(REFUSED) as raised:
            do_put(proc.location, ("ns", "orders"), BATCH)
        assert "FAILED_PRECONDITION" in str(raised.value) and "'broken'" in str(raised.value)
        assert "cannot be evaluated" in str(raised.value)
        connection = flight_sql.connect(proc.location, autocommit=True)
        try:
            with pytest.raises(Exception, match="cannot be evaluated"):
                sql(connection, "INSERT INTO ns.orders VALUES (9, 1.0, 'new')")
            with pytest.raises(Exception, match="cannot be evaluated"):
                with connection.cursor() as cur:
                    cur.adbc_ingest("orders", BATCH, mode="append", db_schema_name="ns")
            assert sql(connection, "SELECT count(*) FROM ns.orders") == [(0,)]
        finally:
            connection.close()
    finally:
        proc.stop()
    assert "Traceback" not in proc.log


def test_sql_refuses_an_expectation_that_cannot_be_evaluated(server: ServerProcess,
                                                             conn: flight_sql.Connection) -> None:
    orders(conn)
    for bad, why in [("no_such_column > 0", "Referenced column"), ("amount + 1", "not a boolean"),
                     ("amount > 0", "on-failure must be one of")]:
        props = {"icefloe.expect.x": bad}
        if why.startswith("on-failure"):
            props["icefloe.expect.x.on-failure"] = "explode"
        text = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        with pytest.raises(Exception, match=why):
            sql(conn, f"ALTER TABLE ns.orders SET ({text})")
    assert sql(conn, "SELECT count(*) FROM ns.orders") == [(0,)]
    do_put(server.location, ("ns", "orders"), BATCH)  # nothing was declared


HOSTILE = [
    "amount > 0) AS x FROM read_text('/etc/passwd') --",
    "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0",
    "current_setting('threads') IS NOT NULL",
    "id IN (SELECT id FROM ns.other)",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_an_expectation_cannot_escape_the_sql_sandbox(tmp_path: Path, hostile: str) -> None:
    proc = serve_with(tmp_path, {"icefloe.expect.sneaky": hostile})
    try:
        with pytest.raises(REFUSED) as raised:
            do_put(proc.location, ("ns", "orders"), BATCH)
        assert "'sneaky'" in str(raised.value) and "cannot be evaluated" in str(raised.value)
        assert "root:" not in str(raised.value)
        connection = flight_sql.connect(proc.location, autocommit=True)
        try:
            assert sql(connection, "SELECT count(*) FROM ns.orders") == [(0,)]
            # Declared in SQL, it is refused there and then.
            quoted = hostile.replace("'", "''")
            with pytest.raises(Exception, match="cannot be evaluated"):
                sql(connection, f"ALTER TABLE ns.orders SET ('icefloe.expect.sneaky2' = '{quoted}')")
        finally:
            connection.close()
    finally:
        proc.stop()
    assert "Traceback" not in proc.log


def test_sql_insert_and_adbc_ingest_are_gated(server: ServerProcess, conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount IS NULL OR amount > 0"})
    with pytest.raises(Exception, match="'positive'"):
        sql(conn, "INSERT INTO ns.orders VALUES (1, 1.0, 'new'), (2, -1.0, 'new')")
    with pytest.raises(Exception, match="'positive'"):
        with conn.cursor() as cur:
            cur.adbc_ingest("orders", BATCH, mode="append", db_schema_name="ns")
    sql(conn, "INSERT INTO ns.orders VALUES (1, 1.0, 'new'), (3, NULL, 'paid')")
    assert sql(conn, "SELECT id FROM ns.orders ORDER BY id") == [(1,), (3,)]


def test_metrics_count_checked_and_failed_rows(tmp_path: Path) -> None:
    import urllib.request

    proc = ServerProcess(tmp_path / "wh", ["--metrics-port", "0"]).start()
    try:
        connection = flight_sql.connect(proc.location, autocommit=True)
        try:
            orders(connection, **{"icefloe.expect.positive": "amount > 0",
                                  "icefloe.expect.positive.on-failure": "warn"})
            do_put(proc.location, ("ns", "orders"), BATCH)
        finally:
            connection.close()
        url = next(line.split("icefloe metrics on ")[1].strip() for line in proc.log_lines
                   if "icefloe metrics on " in line)
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        labels = 'action="warn",expectation="positive",table="ns.orders"'
        assert f"icefloe_quality_checked_rows_total{{{labels}}} 4.0" in text
        assert f"icefloe_quality_failed_rows_total{{{labels}}} 2.0" in text
    finally:
        proc.stop()


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_update_and_merge_are_gated_and_quarantine_refuses_them(server: ServerProcess, conn: flight_sql.Connection,
                                                                mode: str) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount > 0", "icefloe.expect.positive.on-failure": "quarantine",
                    "write.update.mode": mode, "write.merge.mode": mode})
    sql(conn, "INSERT INTO ns.orders VALUES (1, 1.0, 'new'), (2, 2.0, 'new')")
    with pytest.raises(Exception, match="'positive' failed on 1 rows.*SQL UPDATE cannot quarantine"):
        sql(conn, "UPDATE ns.orders SET amount = -amount WHERE id = 2")
    with pytest.raises(Exception, match="'positive' failed on 1 rows.*MERGE cannot quarantine"):
        sql(conn, "MERGE INTO ns.orders t USING (SELECT 3 AS id, -3.0 AS amount) s ON t.id = s.id "
                  "WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.amount, 'new')")
    assert sql(conn, "SELECT id, amount FROM ns.orders ORDER BY id") == [(1, 1.0), (2, 2.0)]
    # Rows the UPDATE leaves as they are are not what it is judged on.
    sql(conn, "UPDATE ns.orders SET amount = amount * 10 WHERE id = 2")
    assert sql(conn, "SELECT id, amount FROM ns.orders ORDER BY id") == [(1, 1.0), (2, 20.0)]


def test_a_transaction_and_a_staged_append_are_gated(server: ServerProcess, conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount > 0"})
    with pytest.raises(Exception, match="'positive'"):
        sql(conn, "BEGIN")
        try:
            sql(conn, "INSERT INTO ns.orders VALUES (1, -1.0, 'new')")
        finally:
            sql(conn, "ROLLBACK")
    with pytest.raises(REFUSED, match="'positive'"):
        do_put(server.location, ("ns", "orders"), BATCH, stage="job-1")
    assert sql(conn, "SELECT count(*) FROM ns.orders") == [(0,)]


def test_the_commit_feed_event_carries_the_quality_results(server: ServerProcess,
                                                           conn: flight_sql.Connection) -> None:
    orders(conn, **{"icefloe.expect.positive": "amount > 0", "icefloe.expect.positive.on-failure": "quarantine"})
    result = do_put(server.location, ("ns", "orders"), BATCH)
    request = {"feed": "commits.v1", "after": "earliest", "tables": ["ns.orders"]}
    with FeedReader(server.location, request) as feed:
        feed.next()  # hello
        events: list[dict[str, object]] = []
        while not any(e["seq"] == result["commit_seq"] for e in events):
            events.extend(feed.events(1))
    by_seq = {e["seq"]: e for e in events}
    quality = json.loads(str(by_seq[result["commit_seq"]]["quality"]))
    assert quality["quarantined_rows"] == 2
    assert [(a["name"], a["failed_rows"], a["checked_rows"]) for a in quality["assertions"]] == [("positive", 2, 4)]
    assert all(e["quality"] is None for e in events if e["operation"] != "append")
