"""The conformance suite every ingest connector must pass, run over each of them.

A real server (port 0) runs the connector; the source is real (a folder, a real HTTP server);
the target is compared with the source row for row. No case is skipped for any connector.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as dbapi
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from ingest_sources import FilesSource, HttpSource, PostgresSource
from servers import ServerProcess

SOURCES = ["files", "http-cursor", "http-link", "postgres"]


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: Any
    if request.param == "files":
        made = FilesSource(tmp_path)
    elif request.param == "postgres":
        made = PostgresSource(request.getfixturevalue("postgres"))
    else:
        made = HttpSource(request.param.split("-")[1])
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the cases that do not kill it (a server start costs seconds on CI)."""
    proc = ServerProcess(tmp_path_factory.mktemp("ingest") / "warehouse").start()
    try:
        sql(proc, "CREATE SCHEMA IF NOT EXISTS ns")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def lake(shared_server: ServerProcess, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """The shared server with a fresh ``ns.t`` (the previous case's table and connector gone)."""
    sql(shared_server, "DROP TABLE IF EXISTS ns.t", "CREATE TABLE ns.t (id BIGINT, name VARCHAR)")
    yield shared_server
    try:
        action(shared_server, "remove", {"name": "conn"})
    except flight.FlightError:
        pass


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "warehouse").start()
    try:
        sql(proc, "CREATE SCHEMA IF NOT EXISTS ns", "CREATE TABLE ns.t (id BIGINT, name VARCHAR)")
        yield proc
    finally:
        proc.stop()


def sql(proc: ServerProcess, *statements: str) -> list[tuple[Any, ...]]:
    with dbapi.connect(proc.location) as conn:
        cur = conn.cursor()
        rows: list[tuple[Any, ...]] = []
        for statement in statements:
            cur.execute(statement)
            if cur.description:
                rows = cur.fetchall()
        conn.commit()
        return rows


def action(proc: ServerProcess, name: str, body: dict[str, Any]) -> Any:
    client = flight.connect(proc.location)
    try:
        results = list(client.do_action(flight.Action(f"icefloe.ingest.{name}", json.dumps(body).encode())))
        return json.loads(results[0].body.to_pybytes())
    finally:
        client.close()


def add(proc: ServerProcess, source: Any, **extra: Any) -> Any:
    """Add the connector; with a long ``poll_s``, wait for its thread's first pass, so that the
    passes a case asks for afterwards are the only ones."""
    body = {"name": "conn", "table": "ns.t", "source": source.kind if source.kind in ("files", "postgres") else "http",
            "options": source.options(), "poll_s": 0.05, **extra}
    added = action(proc, "add", body)
    if body["poll_s"] >= 60:
        wait_for(lambda: action(proc, "status", {"name": "conn"})["passes"] >= 1)
    return added


def target(proc: ServerProcess, columns: str = "id, name") -> list[tuple[Any, ...]]:
    return sql(proc, f"SELECT {columns} FROM ns.t ORDER BY id")


def expected(source: Any) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["name"]) for r in source.rows())


def batch(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}"} for i in range(start, start + count)]


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def test_resume_after_kill_9_no_gap_no_duplicate(own_server: ServerProcess, source: Any) -> None:
    """kill -9 of the server at random points while the connector runs (small commits, so kills
    land between reads and commits and inside commits); after restarts the target holds every
    source row exactly once."""
    lake = own_server
    rng = random.Random(43)
    for i in range(8):
        source.add(batch(i * 4, 4))
    add(lake, source, max_rows=3)  # several commits per pass
    next_id = 32
    for _round in range(3):
        time.sleep(rng.uniform(0.05, 0.6))
        lake.kill()
        for _ in range(3):  # the source keeps growing while the server is down
            source.add(batch(next_id, 3))
            next_id += 3
        lake.start()
    wait_for(lambda: len(target(lake)) >= len(source.rows()))
    time.sleep(0.5)  # a duplicate would show up now
    assert target(lake) == expected(source)
    status = action(lake, "status", {"name": "conn"})
    assert status["checkpoint"]["step"] >= 1
    # The checkpoint says so too: one more pass finds nothing.
    assert action(lake, "run", {"name": "conn", "once": True})["run"]["rows"] == 0
    assert target(lake) == expected(source)


def test_empty_source(lake: ServerProcess, source: Any) -> None:
    add(lake, source, poll_s=3600)  # nothing in the background: passes are asked for
    status = action(lake, "run", {"name": "conn", "once": True})
    assert status["run"] == {"rows": 0, "commits": 0, "envelopes": status["run"]["envelopes"], "duplicates": 0,
                             "stalled": False}
    assert status["state"] == "up" and status["checkpoint"]["step"] == 0
    assert target(lake) == []
    source.add(batch(1, 5))
    # A streaming source (postgres) may have taken them in the background already (its
    # connector wakes when changes arrive); the target holds them once either way.
    taken = (0, 5) if source.kind == "postgres" else (5,)
    assert action(lake, "run", {"name": "conn", "once": True})["run"]["rows"] in taken
    assert target(lake) == expected(source)


def test_schema_change_goes_through_the_tables_policy(lake: ServerProcess, source: Any) -> None:
    add(lake, source, poll_s=3600)
    source.add(batch(1, 3))
    action(lake, "run", {"name": "conn", "once": True})
    source.add([{"id": 10, "name": "n10", "extra": "x"}])
    # The table's policy (match) refuses a new column: nothing committed, the checkpoint stays.
    with pytest.raises(pa.ArrowException) as refused:  # FAILED_PRECONDITION (as pyarrow.flight maps it)
        action(lake, "run", {"name": "conn", "once": True})
    assert str(refused.value).startswith("FAILED_PRECONDITION")
    assert "extra" in str(refused.value) and "nothing was committed" in str(refused.value)
    status = action(lake, "status", {"name": "conn"})
    assert status["state"] == "failed" and status["checkpoint"]["step"] == 1
    assert target(lake) == expected(source)[:3]
    # Once the table opts in, the same data goes in, with the new column.
    sql(lake, "ALTER TABLE ns.t SET (\"icefloe.schema-policy\" = 'evolve')")
    landed = action(lake, "run", {"name": "conn", "once": True})
    # A streaming source (postgres) retries in the background as well, so that retry may land
    # the row just before this pass: then this pass finds nothing new. Either way the row lands
    # once (the target below).
    assert landed["run"]["rows"] in ((0, 1) if source.kind == "postgres" else (1,))
    assert target(lake, "id, name, extra") == [(1, "n1", None), (2, "n2", None), (3, "n3", None), (10, "n10", "x")]


def test_source_down_and_back(lake: ServerProcess, source: Any) -> None:
    add(lake, source, poll_s=3600)
    source.add(batch(1, 4))
    action(lake, "run", {"name": "conn", "once": True})
    source.add(batch(5, 4))
    source.down()
    with pytest.raises(flight.FlightUnavailableError):
        action(lake, "run", {"name": "conn", "once": True})
    status = action(lake, "status", {"name": "conn"})
    # A streaming source (postgres) wakes its connector as soon as changes arrive, whatever
    # poll_s says, so the second batch may have landed before the source went down; either way
    # the checkpoint is that of the rows the target holds.
    steps = (1, 2) if source.kind == "postgres" else (1,)
    assert status["state"] == "down" and status["checkpoint"]["step"] in steps
    assert len(target(lake)) == 4 * status["checkpoint"]["step"]
    source.up()
    action(lake, "run", {"name": "conn", "once": True})
    assert action(lake, "status", {"name": "conn"})["state"] == "up"
    assert target(lake) == expected(source)


def test_cursor_that_stops_advancing(lake: ServerProcess, source: Any) -> None:
    add(lake, source, poll_s=3600)
    source.add(batch(1, 5))
    action(lake, "run", {"name": "conn", "once": True})
    source.stall()
    for _ in range(2):
        status = action(lake, "run", {"name": "conn", "once": True})
        assert status["run"]["rows"] == 0
    assert status["state"] == source.stall_state
    assert target(lake) == expected(source)
