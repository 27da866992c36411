"""A query that pins no table leaves its DuckDB cursor to its slot's next query: a new cursor's
``USE`` is a statement of its own, ~a fifth of a ``SELECT 1`` end to end. Only a cursor left as
it was made is kept; the watchdog never interrupts a query it sees released."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from engine_slots import kept_cursor

from catalog import RocksCatalog
from flight_server.engine import Engine
from flight_server.engine.watchdog import Running, Watchdog


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    engine = Engine(cat, query_timeout_s=5, max_concurrent=1)
    yield engine
    engine.close()
    cat.close()


def _run(engine: Engine, sql: str, default_schema: tuple[str, ...] | None = None) -> pa.Table:
    planned, pins = engine.plan(sql, default_schema)
    return engine.query_table(planned, pins, default_schema)



def test_a_query_without_tables_leaves_its_cursor_to_the_next(engine: Engine) -> None:
    assert _run(engine, "SELECT 1 AS x").column("x").to_pylist() == [1]
    first = kept_cursor(engine, single_thread=True)
    assert first is not None
    assert _run(engine, "SELECT 2 AS x").column("x").to_pylist() == [2]
    assert kept_cursor(engine, single_thread=True) is first
    # Its catalog is still icefloe's (the USE it was made with).
    assert _run(engine, "SELECT current_database() AS d").column("d").to_pylist() == ["icefloe"]


def test_a_query_over_a_table_or_a_failed_one_never_leaves_its_cursor(engine: Engine) -> None:
    _run(engine, "SELECT 1")
    assert _run(engine, "SELECT count(*) AS n FROM t", ("ns",)).column("n").to_pylist() == [3]
    assert kept_cursor(engine) is None  # it registered the table's sources and set search_path: closed
    with pytest.raises(Exception, match="Could not convert"):
        _run(engine, "SELECT CAST('x' || random()::VARCHAR AS INTEGER)")
    assert kept_cursor(engine, single_thread=True) is None


def _threads_of_last_slot(engine: Engine) -> tuple[bool, int]:
    slot = engine.slots._free[-1]
    return slot.single_thread, int(slot.admin.execute("SELECT current_setting('threads')").fetchall()[0][0])


@pytest.mark.parametrize(("sql", "single"), [
    ("SELECT 1 AS x", True),
    ("SELECT now() IS NOT NULL AS x", True),
    ("SELECT * FROM (VALUES (1), (2)) v(x) WHERE x = 1", True),
    # A table function, a CTE or a table anywhere in the query: DuckDB may run it in parallel.
    ("SELECT count(*) - 9 AS x FROM range(10)", False),
    ("SELECT (SELECT max(i) FROM range(3) r(i)) - 1 AS x", False),
    ("WITH c AS (SELECT 1 AS x) SELECT x FROM c", False),
    ("SELECT count(*) - 2 AS x FROM ns.t", False),
])
def test_a_query_that_reads_nothing_runs_on_a_one_thread_slot(engine: Engine, sql: str, single: bool) -> None:
    # One thread: DuckDB runs the statement on the calling thread, no hand-off to a worker.
    assert _run(engine, sql).column("x").to_pylist() == [1]
    one_thread, threads = _threads_of_last_slot(engine)
    assert one_thread is single
    if single:
        assert threads == 1


def test_one_thread_slots_count_against_the_limit(engine: Engine) -> None:
    # max_concurrent=1: a held one-thread slot leaves no room for another query of any kind.
    held = engine.execute("SELECT 1 AS x", [], None)
    with pytest.raises(Exception, match="too many concurrent queries"):
        engine.slots.take(wait_s=0.1)
    del held
    assert _run(engine, "SELECT count(*) AS x FROM range(1)").column("x").to_pylist() == [1]


def _kept_of_last_slot(engine: Engine) -> Any:
    """The cursor kept by the slot the last query gave back (slots are made per file set)."""
    return engine.slots._free[-1]._kept


def test_a_query_over_kept_read_parquet_views_only_leaves_its_cursor(engine: Engine) -> None:
    # Qualified: nothing is registered on the cursor and no search_path is set (the view is the
    # slot's own), so its next query (a point lookup's DoGet after its bind) skips a new cursor.
    assert _run(engine, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [3]
    first = _kept_of_last_slot(engine)
    assert first is not None
    assert _run(engine, "SELECT id FROM ns.t WHERE id = 2").column("id").to_pylist() == [2]
    assert _kept_of_last_slot(engine) is first
    # An unqualified name sets search_path on the cursor: that one is closed, not kept.
    assert _run(engine, "SELECT count(*) AS n FROM t", ("ns",)).column("n").to_pylist() == [3]
    assert _kept_of_last_slot(engine) is None
    assert _run(engine, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [3]
    assert _kept_of_last_slot(engine) not in (None, first)


class _Cursor:
    def __init__(self) -> None:
        self.interrupts = 0

    def interrupt(self) -> None:
        self.interrupts += 1


def test_an_interrupt_is_never_sent_to_a_query_released_meanwhile() -> None:
    """The watchdog decides on a snapshot of the running queries; a query released between
    that snapshot and the interrupt would have had its kept cursor interrupted while the slot
    already ran the next query."""
    run = Running(None, _Cursor(), None, deadline=float("inf"))  # type: ignore[arg-type]

    class ReleasesWhileAsked(threading.Event):
        def is_set(self) -> bool:  # the server is stopping, and the query ends right now
            watchdog.remove(run)
            return True

    watchdog = Watchdog(ReleasesWhileAsked())
    try:
        watchdog.add(run)
        watchdog.watch_once(0.0)
        assert run.cursor.interrupts == 0  # type: ignore[attr-defined]
        assert run.interrupted is None
    finally:
        watchdog.close()
