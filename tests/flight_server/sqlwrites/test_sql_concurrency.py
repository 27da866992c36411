"""Concurrent SQL writes to one table: lost commit races are retried on the new snapshot, so
no update is lost and none is applied twice (never merged blindly)."""

from __future__ import annotations

import threading
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
from servers import ServerProcess
from sqlwrites_lib import log_head, log_records, rows, update

THREADS = 4
ROUNDS = 5


def test_concurrent_updates_and_inserts_lose_nothing(
    conn: Any, write_server: ServerProcess, reader_catalog: Any
) -> None:
    update(conn, "CREATE SCHEMA conc")
    update(conn, "CREATE TABLE conc.counter (id INT NOT NULL, n BIGINT NOT NULL)")
    update(conn, "INSERT INTO conc.counter VALUES (1, 0), (2, 0)")
    update(conn, "CREATE TABLE conc.events (k INT)")
    head = log_head(reader_catalog)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(worker_id: int) -> None:
        with fsql.connect(write_server.location, autocommit=True) as c:
            for i in range(ROUNDS):
                for statement in ("UPDATE conc.counter SET n = n + 1 WHERE id = 1",
                                  f"INSERT INTO conc.events VALUES ({worker_id * 100 + i})"):
                    try:
                        update(c, statement)
                        result = "ok"
                    except adbc_driver_manager.Error as exc:
                        result = "aborted" if "kept changing" in str(exc) else f"error: {exc}"
                    with lock:
                        outcomes.append(result if result != "ok" else f"ok {statement.split()[0]}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads)
    assert all(o in ("ok UPDATE", "ok INSERT", "aborted") for o in outcomes), outcomes
    records = log_records(reader_catalog, head)
    # Only the UPDATEs' own commits (background maintenance may compact the small files).
    landed_updates = [r for r in records if r.table == "counter" and r.extra.get("sql", "").startswith("UPDATE")]
    counter = {r["id"]: r["n"] for r in rows(conn, "SELECT * FROM conc.counter")}
    # Every acknowledged UPDATE is exactly one commit and exactly one increment.
    assert counter == {1: outcomes.count("ok UPDATE"), 2: 0}
    assert len(landed_updates) == outcomes.count("ok UPDATE")
    # Every acknowledged INSERT is there once (concurrent INSERTs may share a group commit).
    events = sorted(r["k"] for r in rows(conn, "SELECT k FROM conc.events"))
    assert len(events) == outcomes.count("ok INSERT") == len(set(events))
    # pyiceberg agrees with SQL.
    scanned = reader_catalog.load_table("conc.counter").scan().to_arrow().to_pylist()
    assert {r["id"]: r["n"] for r in scanned} == counter
