"""Merge-on-read DELETE / UPDATE under concurrency and crashes: a lost commit race re-plans on
the new snapshot (no lost update, no delete applied to rows it did not read), and a server
killed with SIGKILL mid-DELETE leaves the table exactly before or exactly after it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pytest
from servers import ServerProcess
from sqlwrites_lib import log_head, log_records, rows, scalar, update

MOR = "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read'"


def test_appends_racing_deletes_and_updates(conn: Any, write_server: ServerProcess, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA morc")
    update(conn, "CREATE TABLE morc.t (id BIGINT NOT NULL, v BIGINT NOT NULL)")
    update(conn, f"ALTER TABLE morc.t SET ({MOR})")
    update(conn, "CREATE TABLE morc.counter (id INT NOT NULL, n BIGINT NOT NULL)")
    update(conn, f"ALTER TABLE morc.counter SET ({MOR})")
    update(conn, "INSERT INTO morc.counter VALUES (1, 0), (2, 0)")
    head = log_head(reader_catalog)
    deleted: list[int] = []
    outcomes: list[str] = []
    lock = threading.Lock()
    appended = 20

    def appender() -> None:
        with fsql.connect(write_server.location, autocommit=True) as c:
            for k in range(appended):
                update(c, f"INSERT INTO morc.t SELECT i, 0 FROM range({k * 100}, {k * 100 + 100}) r(i)")

    def deleter() -> None:
        with fsql.connect(write_server.location, autocommit=True) as c:
            for _ in range(8):
                try:
                    n = update(c, "DELETE FROM morc.t WHERE id % 2 = 0")
                    with lock:
                        deleted.append(n)
                except adbc_driver_manager.Error as exc:
                    assert "kept changing" in str(exc), exc
                time.sleep(0.02)

    def bumper() -> None:
        with fsql.connect(write_server.location, autocommit=True) as c:
            for _ in range(6):
                try:
                    update(c, "UPDATE morc.counter SET n = n + 1 WHERE id = 1")
                    result = "ok"
                except adbc_driver_manager.Error as exc:
                    assert "kept changing" in str(exc), exc
                    result = "aborted"
                with lock:
                    outcomes.append(result)

    threads = [threading.Thread(target=f) for f in (appender, deleter, deleter, bumper, bumper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    deleted.append(update(conn, "DELETE FROM morc.t WHERE id % 2 = 0"))
    ids = [r["id"] for r in rows(conn, "SELECT id FROM morc.t ORDER BY id")]
    # Every appended odd row is there, every even row deleted exactly once (the counts add up).
    assert ids == list(range(1, appended * 100, 2))
    assert sum(deleted) == appended * 50
    records = [r for r in log_records(reader_catalog, head) if r.table == "t" and r.operation == "delete"]
    assert sorted(r.deleted_rows for r in records) == sorted(n for n in deleted if n)
    # Every acknowledged UPDATE is one increment; the old row versions are all deleted.
    assert rows(conn, "SELECT id, n FROM morc.counter ORDER BY id") == [
        {"id": 1, "n": outcomes.count("ok")}, {"id": 2, "n": 0}]
    scanned = reader_catalog.load_table("morc.counter").scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["n"]) for r in scanned) == [(1, outcomes.count("ok")), (2, 0)]


def _deletes_files(warehouse: Path) -> set[str]:
    return {str(p) for p in (warehouse / "crash" / "t" / "data").rglob("*-deletes-*.parquet")}


@pytest.mark.parametrize("when", ["file-written", "0.1s", "0.4s"])
def test_kill_mid_delete_leaves_nothing_half_visible(tmp_path: Path, when: str) -> None:
    server = ServerProcess(tmp_path / "warehouse").start()
    try:
        with fsql.connect(server.location, autocommit=True) as c:
            update(c, "CREATE SCHEMA crash")
            update(c, "CREATE TABLE crash.t (id BIGINT NOT NULL, p INTEGER, s VARCHAR) PARTITIONED BY (p)")
            update(c, f"ALTER TABLE crash.t SET ({MOR})")
            for k in range(4):
                update(c, f"INSERT INTO crash.t SELECT i, CAST(i % 4 AS INTEGER), repeat('x', 20) "
                          f"FROM range({k * 100_000}, {(k + 1) * 100_000}) r(i)")
        before = _deletes_files(server.warehouse)
        outcome: list[Any] = []

        def run() -> None:
            try:
                with fsql.connect(server.location, autocommit=True) as c:
                    outcome.append(update(c, "DELETE FROM crash.t WHERE id % 10 = 3"))
            except Exception as exc:  # the server dies under it: any client error
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        if when == "file-written":
            deadline = time.monotonic() + 60
            while not _deletes_files(server.warehouse) - before and time.monotonic() < deadline:
                time.sleep(0.001)
        else:
            time.sleep(float(when.rstrip("s")))
        server.kill()
        thread.join(timeout=60)
        server.start()
        with fsql.connect(server.location, autocommit=True) as c:
            count = scalar(c, "SELECT count(*) FROM crash.t")
            left = scalar(c, "SELECT count(*) FROM crash.t WHERE id % 10 = 3")
            # All or nothing: either no row of the DELETE is gone, or all of them are.
            assert (count, left) in ((400_000, 40_000), (360_000, 0)), (count, left)
            if outcome and isinstance(outcome[0], int):
                assert (count, left) == (360_000, 0)  # acknowledged: durable
            from catalog import RocksCatalog

            cat = RocksCatalog("r", warehouse=str(server.warehouse), **{"read-only": "true"})
            try:
                deletes = [r for r in cat.log.read(0) if r.operation == "delete"]
            finally:
                cat.close()
            assert [r.deleted_rows for r in deletes] == ([40_000] if left == 0 else [])
            # The statement can be run (again) and completes.
            assert update(c, "DELETE FROM crash.t WHERE id % 10 = 3") == left
            assert scalar(c, "SELECT count(*) FROM crash.t") == 360_000
    finally:
        server.stop()
