"""The Postgres CDC connector against a real PostgreSQL cluster (scripts/postgres-server) and a
real server: kill -9 in the middle of inserts, updates, deletes and multi-row transactions,
then source and target compared row for row; precise refusals; the DSN password kept out of
status, errors and the log; the connector declared in a server config file."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from ingest_sources import PostgresSource
from servers import ServerProcess
from test_ingest_conformance import action, sql, wait_for
from test_ingest_server import cli

PASSWORD = "pw-that-must-never-show-9f3k"


@pytest.fixture
def source(postgres: Any) -> Iterator[PostgresSource]:
    made = PostgresSource(postgres)
    try:
        yield made
    finally:
        made.close()


def target(proc: ServerProcess) -> list[tuple[Any, ...]]:
    return sql(proc, "SELECT id, name FROM ns.t ORDER BY id")


def expected(source: PostgresSource) -> list[tuple[Any, ...]]:
    return [(r["id"], r["name"]) for r in source.rows()]


def workload(source: PostgresSource, rng: random.Random, next_id: int) -> int:
    """Inserts, updates (one of them moving a key), deletes, and multi-row transactions of all three."""
    table = source.table
    with source.server.connect() as conn:
        for _ in range(4):
            with conn.transaction():  # a multi-row transaction mixing all three
                conn.execute(f"INSERT INTO {table} SELECT g, 'i' || g FROM generate_series(%s::bigint, %s::bigint) g",
                             (next_id, next_id + 4))
                conn.execute(f"UPDATE {table} SET name = name || '+u' WHERE id %% 7 = %s::int", (rng.randrange(7),))
                conn.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY random() LIMIT 2)")
            next_id += 5
            conn.execute(f"UPDATE {table} SET name = 'single' WHERE id = (SELECT min(id) FROM {table})")
            conn.execute(f"DELETE FROM {table} WHERE id = (SELECT max(id) FROM {table})")
        # A key that moves: the old key's row must go, the new one arrive.
        conn.execute(f"UPDATE {table} SET id = id + 100000 WHERE id = (SELECT min(id) FROM {table} "
                     "WHERE id < 100000)")
    return next_id


def test_kill_9_during_changes_then_source_and_target_agree_row_for_row(tmp_path: Path,
                                                                          source: PostgresSource) -> None:
    proc = ServerProcess(tmp_path / "warehouse").start()
    try:
        sql(proc, "CREATE SCHEMA IF NOT EXISTS ns", "CREATE TABLE ns.t (id BIGINT, name VARCHAR)",
            "ALTER TABLE ns.t SET (\"write.delete.mode\" = 'merge-on-read')")
        source.add([{"id": i, "name": f"s{i}"} for i in range(1, 41)])  # the initial snapshot's rows
        action(proc, "add", {"name": "pg", "table": "ns.t", "source": "postgres", "options": source.options(),
                             "poll_s": 0.05, "max_rows": 7})
        rng = random.Random(43)
        next_id = 1000
        for _round in range(3):
            next_id = workload(source, rng, next_id)
            time.sleep(rng.uniform(0.05, 0.5))
            proc.kill()
            next_id = workload(source, rng, next_id)  # the source moves on while the server is down
            proc.start()
        wait_for(lambda: target(proc) == expected(source), timeout=90)
        time.sleep(0.5)  # a late duplicate or a lost delete would show now
        assert target(proc) == expected(source)
        # The restarted server streams from the slot (a walsender holds it), not by SQL peeks.
        assert source.server.execute("SELECT s.application_name FROM pg_replication_slots r JOIN pg_stat_replication s "
                                     "ON s.pid = r.active_pid WHERE r.slot_name = %s",
                                     params=(source.slot,)) == [("icefloe-ingest-stream",)]
        run = action(proc, "run", {"name": "pg", "once": True})
        assert run["run"]["rows"] == 0 and run["state"] == "up"
        assert target(proc) == expected(source)
        # The slot was confirmed up to the checkpoint that landed, never past it.
        position = run["checkpoint"]["positions"][""]
        slot = source.server.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                     params=(source.slot,))[0][0]
        high, low = slot.split("/")
        assert (int(high, 16) << 32 | int(low, 16)) <= int(position[4:20], 16)
    finally:
        proc.stop()


def test_refusals_password_and_a_connector_from_the_config_file(tmp_path: Path, postgres: Any,
                                                                source: PostgresSource) -> None:
    """One server: its config file declares a postgres connector with a password in the DSN."""
    keyless, keyless_pub, keyless_slot = postgres.names()
    postgres.execute(f"CREATE TABLE {keyless} (id BIGINT, name TEXT)",
                     f"CREATE PUBLICATION {keyless_pub} FOR TABLE {keyless}",
                     f"INSERT INTO {keyless} VALUES (1, 'a'), (2, 'b')")
    secret_dsn = postgres.dsn.replace("icefloe@", f"icefloe:{PASSWORD}@")  # trust auth: accepted, unused
    source.add([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])
    config = tmp_path / "connectors.toml"
    config.write_text(f'[connectors.pg]\ntable = "ns.t"\nsource = "postgres"\npoll_s = 0.05\n\n'
                      f'[connectors.pg.options]\ndsn = "{secret_dsn}"\ntable = "public.{source.table}"\n'
                      f'publication = "{source.publication}"\nslot = "{source.slot}"\n')
    warehouse = tmp_path / "warehouse"
    proc = ServerProcess(warehouse).start()
    sql(proc, "CREATE SCHEMA ns", "CREATE TABLE ns.t (id BIGINT, name VARCHAR)",
        "CREATE TABLE ns.k (id BIGINT, name VARCHAR)")
    proc.stop()
    proc = ServerProcess(warehouse, ["--ingest-config", str(config)]).start()
    try:
        wait_for(lambda: target(proc) == [(1, "one"), (2, "two")])
        source.server.execute(f"UPDATE {source.table} SET name = 'uno' WHERE id = 1",
                              f"DELETE FROM {source.table} WHERE id = 2")
        wait_for(lambda: target(proc) == [(1, "uno")])
        status = action(proc, "status", {"name": "pg"})
        assert status["origin"] == "config" and status["source_uri"].startswith("postgres://127.0.0.1:")
        # No primary key: refused, saying what to do; nothing committed.
        options = {"dsn": secret_dsn, "table": keyless, "publication": keyless_pub, "slot": keyless_slot}
        action(proc, "add", {"name": "keyless", "table": "ns.k", "source": "postgres", "options": options,
                             "poll_s": 3600})
        with pytest.raises(pa.ArrowException) as refused:  # FAILED_PRECONDITION, as pyarrow.flight maps it
            action(proc, "run", {"name": "keyless", "once": True})
        message = str(refused.value)
        assert message.startswith("FAILED_PRECONDITION") and "has no primary key" in message
        assert f"ALTER TABLE public.{keyless} REPLICA IDENTITY FULL" in message
        assert sql(proc, "SELECT count(*) FROM ns.k") == [(0,)]
        postgres.execute(f"ALTER TABLE {keyless} REPLICA IDENTITY FULL", f"UPDATE {keyless} SET name = 'z' "
                         "WHERE id = 2")
        action(proc, "run", {"name": "keyless", "once": True})
        assert sql(proc, "SELECT id, name FROM ns.k ORDER BY id") == [(1, "a"), (2, "z")]
        # A source that cannot be reached: UNAVAILABLE, the password in no message.
        port = int(postgres.dsn.rsplit(":", 1)[1].split("/")[0])
        away = {**options, "dsn": secret_dsn.replace(f":{port}/", ":1/"), "slot": keyless_slot + "x"}
        action(proc, "add", {"name": "away", "table": "ns.k", "source": "postgres", "options": away, "poll_s": 3600})
        with pytest.raises(flight.FlightUnavailableError) as down:
            action(proc, "run", {"name": "away", "once": True})
        shown = [str(down.value), json.dumps(action(proc, "status", {})), json.dumps(action(proc, "list", {}))]
        assert action(proc, "status", {"name": "away"})["state"] == "down"
    finally:
        proc.stop()
        postgres.drop_slot(keyless_slot)
        postgres.execute(f"DROP PUBLICATION {keyless_pub}", f"DROP TABLE {keyless}")
    for text in [*shown, proc.log]:
        assert PASSWORD not in text


def test_types_from_the_relation_message_match_the_snapshot(tmp_path: Path, postgres: Any) -> None:
    """Rows of many types arrive with the same values through the snapshot (text casts) and the
    stream (pgoutput text by type OID); in-process, a real catalog."""
    import datetime
    import decimal

    from catalog import RocksCatalog
    from catalog.append import Appender
    from icefloe.ingest.postgres_cdc import PostgresCdcConnector
    from icefloe.ingest.runner import IngestRunner
    from icefloe.ingest.sink import CatalogSink

    table, publication, slot = postgres.names()
    postgres.execute(
        f"CREATE TABLE {table} (id INT PRIMARY KEY, b BOOL, s SMALLINT, n NUMERIC(10,2), f FLOAT8, r REAL, "
        "d DATE, t TIMESTAMP, tz TIMESTAMPTZ, tm TIME, raw BYTEA, u UUID, j JSONB, v VARCHAR(5), big BIGINT)",
        f"CREATE PUBLICATION {publication} FOR TABLE {table}")
    insert = (f"INSERT INTO {table} VALUES (%s, true, -3, 12345.67, 0.1, 1.5, '2024-02-29', "
              "'2024-02-29 13:14:15.123456', '2024-02-29 13:14:15.5+02', '23:59:59.25', '\\x00ff10', "
              "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2]}', 'héllo', 9007199254740993)")
    postgres.execute(insert, params=(1,))
    postgres.execute(f"INSERT INTO {table} (id) VALUES (2)")  # NULLs everywhere else
    connector = PostgresCdcConnector({"dsn": postgres.dsn, "table": table, "publication": publication, "slot": slot})
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})
    try:
        catalog.create_namespace(("ns",))
        catalog.create_table(("ns", "t"), schema=connector.discover())
        runner = IngestRunner("types", connector, CatalogSink(Appender(catalog), "ns.t"))
        assert runner.run_once().rows == 2  # the snapshot
        postgres.execute(insert, params=(3,))  # the same values, through the stream
        postgres.execute(f"INSERT INTO {table} (id) VALUES (4)")
        assert runner.run_once().rows == 2
        rows = sorted(catalog.load_table(("ns", "t")).scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    finally:
        connector.close()
        catalog.close()
        postgres.drop_slot(slot)
        postgres.execute(f"DROP PUBLICATION {publication}", f"DROP TABLE {table}")
    want = {"b": True, "s": -3, "n": decimal.Decimal("12345.67"), "f": 0.1, "r": 1.5,
            "d": datetime.date(2024, 2, 29), "t": datetime.datetime(2024, 2, 29, 13, 14, 15, 123456),
            "tz": datetime.datetime(2024, 2, 29, 11, 14, 15, 500000, tzinfo=datetime.UTC),
            "tm": datetime.time(23, 59, 59, 250000), "raw": b"\x00\xff\x10",
            "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "j": '{"k": [1, 2]}', "v": "héllo", "big": 9007199254740993}
    assert [r["id"] for r in rows] == [1, 2, 3, 4]
    for snapshot_row, stream_row in ((rows[0], rows[2]), (rows[1], rows[3])):
        assert {k: v for k, v in snapshot_row.items() if k != "id"} == {k: v for k, v in stream_row.items()
                                                                        if k != "id"}
    assert {k: rows[2][k] for k in want} == want
    assert all(v is None for k, v in rows[3].items() if k != "id")


def test_truncate_empties_the_target_and_an_idle_stream_survives_the_wal_sender_timeout(
        tmp_path: Path, postgres: Any) -> None:
    """In-process, a real catalog: a TRUNCATE at the source empties the target in the commit of
    its transaction and the connector goes on; the stream stays open through idle periods
    longer than wal_sender_timeout while the runner waits (keepalives answered: the walsender
    stays the same), and a stream the server closed while nothing ran is started again."""
    import threading

    from catalog import RocksCatalog
    from catalog.append import Appender
    from icefloe.ingest.contract import State
    from icefloe.ingest.postgres_cdc import PostgresCdcConnector
    from icefloe.ingest.runner import IngestRunner
    from icefloe.ingest.sink import CatalogSink

    table, publication, slot = postgres.names()
    postgres.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT)",
                     f"CREATE PUBLICATION {publication} FOR TABLE {table}",
                     f"INSERT INTO {table} SELECT g, 's' || g FROM generate_series(1, 5) g")
    connector = PostgresCdcConnector({"dsn": postgres.dsn, "table": table, "publication": publication, "slot": slot})
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})
    stop = threading.Event()
    thread: threading.Thread | None = None

    def walsender() -> list[tuple[Any, ...]]:
        return postgres.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", params=(slot,))

    def source_rows() -> list[tuple[Any, ...]]:
        return [tuple(r) for r in postgres.execute(f"SELECT id, name FROM {table} ORDER BY id")]

    def target_rows() -> list[tuple[Any, ...]]:
        rows = catalog.load_table(("ns", "t")).scan().to_arrow().to_pylist()
        return sorted((r["id"], r["name"]) for r in rows)

    try:
        catalog.create_namespace(("ns",))
        catalog.create_table(("ns", "t"), schema=connector.discover())
        runner = IngestRunner("trunc", connector, CatalogSink(Appender(catalog), "ns.t"))
        assert runner.run_once().rows == 5  # the snapshot
        postgres.execute(f"INSERT INTO {table} VALUES (6, 'six')", f"UPDATE {table} SET name = 'one' WHERE id = 1")
        runner.run_once()
        assert target_rows() == source_rows()
        with postgres.connect() as conn, conn.transaction():
            conn.execute(f"INSERT INTO {table} VALUES (7, 'gone with the truncate')")
            conn.execute(f"TRUNCATE {table}")
            conn.execute(f"INSERT INTO {table} VALUES (100, 'after')")
        postgres.execute(f"INSERT INTO {table} VALUES (101, 'next')", f"UPDATE {table} SET name = 'x' WHERE id = 100")
        stats = runner.run_once()
        assert stats.commits == 1  # the truncating transaction and the next one: one batch
        assert target_rows() == source_rows() == [(100, "x"), (101, "next")]
        assert runner.status().state is State.UP
        # Idle for longer than wal_sender_timeout while the runner waits between passes.
        postgres.execute("ALTER SYSTEM SET wal_sender_timeout = '1s'", "SELECT pg_reload_conf()")
        thread = threading.Thread(target=runner.run_forever, args=(stop, 0.3), daemon=True)
        thread.start()
        before = walsender()
        time.sleep(3.5)
        assert walsender() == before and before[0][0] is not None  # the same walsender: never timed out
        postgres.execute(f"INSERT INTO {table} VALUES (102, 'while idle')")
        wait_for(lambda: target_rows() == source_rows(), timeout=30)
        stop.set()
        thread.join(30)
        # Nothing runs now: the server ends the stream after wal_sender_timeout ...
        wait_for(lambda: walsender()[0][0] is None, timeout=30)
        postgres.execute(f"DELETE FROM {table} WHERE id = 101")
        # ... and the next pass starts it again by itself, missing nothing.
        assert runner.run_once().commits == 1
        assert target_rows() == source_rows() == [(100, "x"), (102, "while idle")]
        assert runner.status().state is State.UP
    finally:
        stop.set()
        if thread is not None:
            thread.join(30)
        postgres.execute("ALTER SYSTEM RESET wal_sender_timeout", "SELECT pg_reload_conf()")
        connector.close()
        catalog.close()
        postgres.drop_slot(slot)
        postgres.execute(f"DROP PUBLICATION {publication}", f"DROP TABLE {table}")


def test_backfill_of_a_key_range_restores_lost_rows_without_moving_the_live_checkpoint(
        tmp_path: Path, postgres: Any) -> None:
    """In-process, a real catalog: rows the target lost come back from a backfill of their key
    range (applied by key: idempotent, a genuine change taken), the live checkpoint and the
    live replication stream stay as they were, and the stream goes on afterwards."""
    import pyarrow as pa

    from catalog import RocksCatalog
    from catalog.append import Appender
    from catalog.ingest_checkpoints import table_checkpoint
    from catalog.keyed_changes import commit_keyed
    from icefloe.ingest.contract import BackfillRange, SourceDataError
    from icefloe.ingest.postgres_cdc import PostgresCdcConnector
    from icefloe.ingest.runner import IngestRunner
    from icefloe.ingest.sink import CatalogSink

    table, publication, slot = postgres.names()
    postgres.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT)",
                     f"CREATE PUBLICATION {publication} FOR TABLE {table}",
                     f"INSERT INTO {table} SELECT g, 's' || g FROM generate_series(1, 30) g")
    connector = PostgresCdcConnector({"dsn": postgres.dsn, "table": table, "publication": publication, "slot": slot,
                                      "snapshot_batch": 4})
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})

    def target_rows() -> list[tuple[Any, ...]]:
        rows = catalog.load_table(("ns", "t")).scan().to_arrow().to_pylist()
        return sorted((r["id"], r["name"]) for r in rows)

    def source_rows() -> list[tuple[Any, ...]]:
        return [tuple(r) for r in postgres.execute(f"SELECT id, name FROM {table} ORDER BY id")]

    try:
        catalog.create_namespace(("ns",))
        catalog.create_table(("ns", "t"), schema=connector.discover())
        appender = Appender(catalog)
        runner = IngestRunner("bf", connector, CatalogSink(appender, "ns.t"))
        runner.run_once()  # the snapshot
        postgres.execute(f"UPDATE {table} SET name = 'live' WHERE id = 3")
        runner.run_once()  # streamed
        assert target_rows() == source_rows()
        live = table_checkpoint(catalog.load_table(("ns", "t")).metadata, "bf")
        streaming = postgres.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                                     params=(slot,))
        # The target loses keys 2..12 (and 25) behind the connector's back.
        lost = pa.table({"id": pa.array([*range(2, 13), 25], pa.int64())})
        nothing = pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
        commit_keyed(appender, ("ns", "t"), nothing, lost, ["id"])
        assert len(target_rows()) == 18
        # A genuine change at the source while the stream is not asked to run: the backfill takes it too.
        postgres.execute(f"UPDATE {table} SET name = 'changed' WHERE id = 5")
        stats = runner.run_once(BackfillRange("2", "12"))
        assert stats.rows == 11 and stats.commits == 3  # pages of 4 rows: 4 + 4 + 3
        want = [r for r in source_rows() if r[0] != 25]
        assert target_rows() == want  # 2..12 back (5 as changed now), 25 not in the range
        again = runner.run_once(BackfillRange("2", "12"))  # the same range again: read again, same rows
        assert again.rows == 11 and target_rows() == want
        after = table_checkpoint(catalog.load_table(("ns", "t")).metadata, "bf")
        assert (after.step, after.positions) == (live.step, live.positions)  # the live checkpoint did not move
        with pytest.raises(SourceDataError, match="invalid input syntax for type bigint"):
            runner.run_once(BackfillRange("not-a-key"))  # refused by the source, nothing committed
        assert target_rows() == want
        # The live stream goes on where it was (id 5's update is applied again, in order).
        postgres.execute(f"INSERT INTO {table} VALUES (31, 'new')")
        runner.run_once()
        assert target_rows() == [r for r in source_rows() if r[0] != 25]
        assert postgres.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                                params=(slot,)) == streaming
    finally:
        connector.close()
        catalog.close()
        postgres.drop_slot(slot)
        postgres.execute(f"DROP PUBLICATION {publication}", f"DROP TABLE {table}")


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # cursors of a killed server
def test_two_tables_one_slot_source_transactions_stay_atomic_through_kill_9_and_the_idle_slot_moves(
        tmp_path: Path, postgres: Any) -> None:
    """One connector, one publication of two tables, one slot: every source transaction
    touches both tables the same way (an id and an amount moved together), so a reader that
    ever sees the two targets differ saw one table with a transaction and the other without.
    A concurrent reader (Flight SQL transactions: both tables at one catalog state) checks that
    all along, through an initial snapshot of both tables, a TRUNCATE of both in one statement,
    a column added to one (its own schema policy), and kill -9 of the server mid-stream; then
    source and target agree row for row. Last, WAL written for an unrelated table moves the
    slot's confirmed_flush_lsn (an idle slot does not hold WAL), but never past a change of
    ours that is not committed (the connector paused)."""
    import threading
    import warnings

    import adbc_driver_flightsql.dbapi as fsql

    a, publication, slot = postgres.names()
    b, unrelated = a + "_b", a + "_x"
    postgres.execute(f"CREATE TABLE {a} (id BIGINT PRIMARY KEY, v BIGINT)",
                     f"CREATE TABLE {b} (id BIGINT PRIMARY KEY, v BIGINT)",
                     f"CREATE TABLE {unrelated} (x BIGINT)",
                     f"CREATE PUBLICATION {publication} FOR TABLE {a}, {b}",
                     f"INSERT INTO {a} SELECT g, g FROM generate_series(1, 30) g",
                     f"INSERT INTO {b} SELECT g, g FROM generate_series(1, 30) g")

    def both(conn: Any, statement: str, params: Any = None) -> None:
        for table in (a, b):
            conn.execute(statement.format(t=table), params)

    def workload(rng: random.Random, next_id: int, rounds: int) -> int:
        with postgres.connect() as conn:
            for _ in range(rounds):
                with conn.transaction():  # one source transaction, the same change in both tables
                    both(conn, "INSERT INTO {t} SELECT g, g FROM generate_series(%s::bigint, %s::bigint) g",
                         (next_id, next_id + 2))
                    both(conn, "UPDATE {t} SET v = v + 1 WHERE id %% 5 = %s::int", (rng.randrange(5),))
                    both(conn, "DELETE FROM {t} WHERE id = (SELECT min(id) FROM {t})")
                next_id += 3
        return next_id

    def source_rows() -> tuple[list[Any], list[Any]]:
        return tuple(postgres.execute(f"SELECT id, v FROM {t} ORDER BY id") for t in (a, b))  # type: ignore[return-value]

    def target_rows(proc: ServerProcess) -> tuple[list[Any], list[Any]]:
        return (sql(proc, "SELECT id, v FROM ns.a ORDER BY id"), sql(proc, "SELECT id, v FROM ns.b ORDER BY id"))

    proc = ServerProcess(tmp_path / "warehouse").start()
    stop = threading.Event()
    seen: list[tuple[Any, ...]] = []
    torn: list[tuple[Any, ...]] = []

    def reader() -> None:
        query = ("SELECT (SELECT count(*) FROM ns.a), (SELECT coalesce(sum(v), 0) FROM ns.a), "
                 "(SELECT count(*) FROM ns.b), (SELECT coalesce(sum(v), 0) FROM ns.b)")
        while not stop.is_set():
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    conn = fsql.connect(proc.location, autocommit=False)
                if caught:  # the server did not answer BEGIN (restarting): reads would not be one state
                    conn.close()
                    raise ConnectionError(str(caught[0].message))
            except Exception:
                time.sleep(0.1)  # the server is down (kill -9) or restarting
                continue
            try:
                while not stop.is_set():
                    with conn.cursor() as cur:
                        cur.execute(query)
                        row = cur.fetchone()
                        if (row[0], row[1]) != (row[2], row[3]):
                            cur.execute("SELECT 'a', id, v FROM ns.a UNION ALL SELECT 'b', id, v FROM ns.b")
                            row = (*row, cur.fetchall()[:20])
                    conn.rollback()  # the next read: a new transaction, at the catalog's newest state
                    seen.append(row)
                    if len(row) > 4:
                        torn.append(row)
            except Exception:  # noqa: S112 - the server went away mid-read
                continue
            finally:
                try:
                    conn.close()
                except Exception:  # noqa: S110
                    pass

    thread = threading.Thread(target=reader, daemon=True)
    try:
        sql(proc, "CREATE SCHEMA IF NOT EXISTS ns", "CREATE TABLE ns.a (id BIGINT, v BIGINT)",
            "CREATE TABLE ns.b (id BIGINT, v BIGINT)",
            "ALTER TABLE ns.a SET (\"write.delete.mode\" = 'merge-on-read')",
            "ALTER TABLE ns.b SET (\"icefloe.schema-policy\" = 'evolve')")
        options = {"dsn": postgres.dsn, "tables": {f"public.{a}": "ns.a", f"public.{b}": "ns.b"},
                   "publication": publication, "slot": slot}
        # Refused: a target that does not exist, a `table` not among the targets (nothing added).
        with pytest.raises(pa.ArrowKeyError, match="table ns.c does not exist"):  # NOT_FOUND
            action(proc, "add", {"name": "bad", "source": "postgres",
                                 "options": {**options, "tables": {f"public.{a}": "ns.c"}}})
        with pytest.raises(pa.ArrowInvalid, match="not one of the targets"):
            action(proc, "add", {"name": "bad", "table": "ns.t", "source": "postgres", "options": options})
        # The CLI's form: --pg-table SOURCE=TARGET, repeated (no --table needed).
        run = cli(proc, "add", "pg2", "--source", "postgres", "--pg-table", f"public.{a}=ns.a", "--pg-table",
                  f"public.{b}=ns.b", "--publication", publication, "--slot", slot, "--dsn", postgres.dsn,
                  "--option", "snapshot_batch=7", "--option", "idle_confirm_ms=100", "--poll-s", "0.05",
                  "--max-rows", "50")
        assert run.returncode == 0, run.stderr
        added = json.loads(run.stdout)
        assert added["tables"] == ["ns.a", "ns.b"] and added["table"] == "ns.a"
        mixed = cli(proc, "add", "x", "--source", "postgres", "--pg-table", f"public.{a}", "--pg-table",
                    f"public.{b}=ns.b", "--publication", publication, "--slot", slot)
        assert mixed.returncode != 0 and "SOURCE=TARGET" in mixed.stderr
        # The initial snapshot: both tables read in one source snapshot, a page per commit (a
        # reader sees the tables fill page by page, as for one table); then the stream, whose
        # source transactions the reader must only ever see whole.
        wait_for(lambda: target_rows(proc) == source_rows(), timeout=60)
        thread.start()
        rng = random.Random(7)
        next_id = workload(rng, 1000, 5)
        with postgres.connect() as conn, conn.transaction():
            conn.execute(f"TRUNCATE {a}, {b}")  # both tables in one statement, then new rows in both
            both(conn, "INSERT INTO {t} SELECT g, 1 FROM generate_series(1, 12) g")
        next_id = workload(rng, next_id, 5)
        for _round in range(2):
            next_id = workload(rng, next_id, 10)
            time.sleep(rng.uniform(0.05, 0.4))
            proc.kill()
            next_id = workload(rng, next_id, 5)  # the source goes on while the server is down
            proc.start()
        wait_for(lambda: target_rows(proc) == source_rows(), timeout=90)
        # A column added to one table at the source: through that table's policy (evolve).
        with postgres.connect() as conn, conn.transaction():
            conn.execute(f"ALTER TABLE {b} ADD COLUMN note TEXT")
            conn.execute(f"UPDATE {b} SET note = 'n' || id WHERE id % 2 = 0")
            conn.execute(f"UPDATE {a} SET v = v WHERE id % 2 = 0")
        next_id = workload(rng, next_id, 3)
        def notes_agree() -> bool:
            try:  # the column arrives with the commit of that transaction
                return sql(proc, "SELECT id, note FROM ns.b ORDER BY id") == postgres.execute(
                    f"SELECT id, note FROM {b} ORDER BY id")
            except Exception:
                return False

        wait_for(notes_agree, timeout=60)
        wait_for(lambda: target_rows(proc) == source_rows(), timeout=60)
        stop.set()
        thread.join(30)
        assert len(seen) > 20, "the reader hardly read"
        assert torn == [], f"a reader saw one table with a source transaction and the other without: {torn[:3]}"
        # Commits of both tables carry one checkpoint; each lands in ONE catalog batch: one
        # connector commit that touched both gave consecutive seqs with the same checkpoint step.
        steps = sql(proc, "SELECT count(*) FROM ns.a")  # the tables are readable after all of it
        assert steps[0][0] == len(source_rows()[0])

        # -- the idle slot ---------------------------------------------------------------------
        def confirmed() -> int:
            return _lsn(postgres.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                         "WHERE slot_name = %s", params=(slot,))[0][0])

        postgres.execute(f"INSERT INTO {unrelated} SELECT g FROM generate_series(1, 20000) g")
        written = _lsn(postgres.execute("SELECT pg_current_wal_lsn()::text")[0][0])
        wait_for(lambda: confirmed() >= written, timeout=30)  # WAL of other tables only: let go of it
        # Never past a change of ours that is not committed: the connector paused, our change
        # then more unrelated WAL; the slot stays before our change.
        action(proc, "pause", {"name": "pg2"})
        time.sleep(0.5)  # a pass in flight finishes
        before = confirmed()
        postgres.execute(f"INSERT INTO {a} VALUES (-1, -1)")
        ours = _lsn(postgres.execute("SELECT pg_current_wal_lsn()::text")[0][0])
        postgres.execute(f"INSERT INTO {unrelated} SELECT g FROM generate_series(1, 20000) g")
        time.sleep(1.5)
        assert before <= confirmed() < ours
        action(proc, "resume", {"name": "pg2"})
        wait_for(lambda: target_rows(proc) == source_rows(), timeout=60)
        wait_for(lambda: confirmed() >= ours, timeout=30)
        # A restart after idle confirmations resumes from the stored idle position (the slot
        # is past the last commit's checkpoint, by WAL that held nothing for us): no refusal.
        postgres.execute(f"INSERT INTO {unrelated} SELECT g FROM generate_series(1, 1000) g")
        idle_at = _lsn(postgres.execute("SELECT pg_current_wal_lsn()::text")[0][0])
        wait_for(lambda: confirmed() >= idle_at, timeout=30)
        proc.kill()
        proc.start()
        postgres.execute(f"INSERT INTO {b} VALUES (-1, -1, 'after')")
        wait_for(lambda: target_rows(proc) == source_rows(), timeout=60)
        assert action(proc, "status", {"name": "pg2"})["state"] == "up"
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(30)
        proc.stop()
        postgres.drop_slot(slot)
        postgres.execute(f"DROP PUBLICATION {publication}", f"DROP TABLE {a}", f"DROP TABLE {b}",
                         f"DROP TABLE {unrelated}")


def test_a_config_file_declares_a_connector_over_several_tables(tmp_path: Path) -> None:
    """The TOML form of the multi-table mapping, and precise refusals of malformed ones (no
    server needed: definitions are checked without touching the source)."""
    pytest.importorskip("psycopg", reason="the postgres source needs psycopg (pip install 'icefloe[postgres]')")
    from flight_server.ingest.specs import InvalidSpec, load_config

    config = tmp_path / "connectors.toml"
    base = ('[connectors.shop]\nsource = "postgres"\n[connectors.shop.options]\ndsn = "postgresql://u@h/db"\n'
            'publication = "p"\nslot = "s"\n')
    config.write_text(base + '[connectors.shop.options.tables]\n"public.orders" = "sales.orders"\n'
                      '"public.items" = "sales.items"\n')
    (spec,) = load_config(str(config))
    assert spec.table == "sales.orders" and spec.targets == ("sales.orders", "sales.items")
    assert spec.connector().table_sources() == {"sales.orders": "postgres://h:5432/db/public.orders",
                                                "sales.items": "postgres://h:5432/db/public.items"}
    for tables, message in ((('"public.orders" = "orders"',), "table must be a table name ns.t"),
                            (('"public.orders" = "s.o"', '"orders" = "s.p"'), "names a source or target table twice"),
                            (('"public.orders" = "s.o"', '"public.items" = "s.o"'), "twice")):
        config.write_text(base + "[connectors.shop.options.tables]\n" + "\n".join(tables) + "\n")
        with pytest.raises(InvalidSpec, match=message):
            load_config(str(config))
    config.write_text(base.replace('source = "postgres"', 'source = "postgres"\ntable = "sales.x"')
                      + '[connectors.shop.options.tables]\n"public.orders" = "sales.orders"\n')
    with pytest.raises(InvalidSpec, match="not one of the targets"):
        load_config(str(config))
