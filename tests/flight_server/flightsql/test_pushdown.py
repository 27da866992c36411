"""File pruning from WHERE clauses: only ever looser than the query, never wrong."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import duckdb
import pytest
from flightsql_samples import make_sample_warehouse
from pyiceberg.expressions import AlwaysTrue
from servers import ServerProcess

from flight_server.engine.iceberg_source import IcebergSources
from flight_server.engine.pushdown import row_filter

PREDICATES = [
    "id = 4",
    "4 = id",
    "id >= 4",
    "id > 3",
    "id < 2",
    "id <= 1",
    "id BETWEEN 2 AND 3",
    "id IN (1, 4)",
    "id < 2.5",
    "id > 3.5",
    "amount > 20.5",
    "amount >= 20.5",
    "customer = 'dee'",
    "customer > 'c'",
    "id = -1",
    "id = 4 OR id = 1",
    "(id > 1) AND (amount < 25)",
    "ID = 4",
    "id = 4 AND customer LIKE 'd%'",
    "id + 0 = 4",
    "id = '4'",
    "NOT id = 4",
    "id IS NULL",
]


@pytest.fixture
def tables(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """The sample warehouse and an in-process catalog on it (a test may close it early)."""
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    make_sample_warehouse(warehouse)
    cat = RocksCatalog("t", warehouse=str(warehouse))
    closed = False
    real_close = cat.close

    def close_once() -> None:
        nonlocal closed
        if not closed:
            closed = True
            real_close()

    cat.close = close_once
    try:
        yield cat, warehouse
    finally:
        close_once()


def test_row_filter_uses_only_safe_conjuncts(tables: tuple[Any, Path]) -> None:
    cat, _ = tables
    schema = cat.load_table("sales.orders").schema()
    assert repr(row_filter("SELECT * FROM sales.orders WHERE id = 4", schema)) == repr(
        row_filter("SELECT * FROM sales.orders WHERE 4 = id", schema)
    )
    assert "GreaterThanOrEqual" in repr(row_filter("SELECT * FROM sales.orders WHERE id BETWEEN 2 AND 3", schema))
    for unsafe in ("id < 2.5", "id = 4 OR id = 1", "id + 0 = 4", "id = '4'", "NOT id = 4", "amount > 1"):
        got = row_filter(f"SELECT * FROM sales.orders WHERE {unsafe}", schema)
        if unsafe == "amount > 1":
            assert "amount" in repr(got)  # a double literal against a double column is fine
        else:
            assert isinstance(got, AlwaysTrue), (unsafe, got)
    joined = "SELECT * FROM sales.orders o JOIN sales.evolved e ON o.id = e.a WHERE o.id = 4"
    assert isinstance(row_filter(joined, schema), AlwaysTrue)


def test_pruned_files_are_skipped(tables: tuple[Any, Path]) -> None:
    cat, _ = tables
    orders = cat.load_table("sales.orders")
    snapshot = orders.metadata.current_snapshot().snapshot_id
    sources = IcebergSources()

    def files(where: str | None) -> int:
        prune = row_filter(f"SELECT * FROM sales.orders WHERE {where}", orders.schema()) if where else None
        return sum(len(part.data.files) for part in sources.parts(orders, snapshot, orders.schema(), prune))

    assert files(None) == 2  # two appends, two data files
    assert files("id = 4") == 1
    assert files("id < 4") == 1
    assert files("id BETWEEN 2 AND 3") == 1


def test_results_match_unpruned_evaluation(tables: tuple[Any, Path]) -> None:
    cat, warehouse = tables
    everything = cat.load_table("sales.orders").scan().to_arrow()
    cat.close()  # the server needs the warehouse
    local = duckdb.connect()
    local.register("orders", everything)
    proc = ServerProcess(warehouse).start()
    try:
        with fsql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            for predicate in PREDICATES:
                cur.execute(f"SELECT id FROM sales.orders WHERE {predicate} ORDER BY id")
                got = [r[0] for r in cur.fetchall()]
                want = [r[0] for r in local.execute(f"SELECT id FROM orders WHERE {predicate} ORDER BY id").fetchall()]
                assert got == want, predicate
    finally:
        proc.stop()


def test_each_new_filter_is_pruned_without_reading_the_manifests_again(tables: tuple[Any, Path]) -> None:
    """A point lookup's key changes with every query: the snapshot's files and statistics are
    read from the manifests once, and each new filter is pruned from them in memory."""
    cat, _ = tables
    orders = cat.load_table("sales.orders")
    snapshot = orders.metadata.current_snapshot()
    sources = IcebergSources()
    every = sources.data_files(orders, snapshot.snapshot_id)
    assert len(every) == 2
    # Gone from disk: any manifest read now fails, so what follows is pruned from memory.
    manifests = [Path(m.manifest_path.removeprefix("file://")) for m in snapshot.manifests(orders.io)]
    manifests.append(Path(snapshot.manifest_list.removeprefix("file://")))
    for path in manifests:
        path.unlink()

    def kept(where: str) -> list[str]:
        prune = row_filter(f"SELECT * FROM sales.orders WHERE {where}", orders.schema())
        return [path for path, _, _ in sources.data_files(orders, snapshot.snapshot_id, prune)]

    for key in (1, 2, 3, 4):
        want = [path for path, _, _ in every if path in kept(f"id BETWEEN {key} AND {key}")]
        assert kept(f"id = {key}") == want and len(want) == 1, key
    assert kept("id = -1") == []
    assert kept("id IS NULL") == [path for path, _, _ in every]  # not a pushed-down filter: every file


def test_a_snapshot_with_too_many_files_to_keep_is_pruned_from_its_manifests(
        tables: tuple[Any, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from flight_server.engine import iceberg_source

    monkeypatch.setattr(iceberg_source, "MAX_KEPT_FILES", 1)  # the sample table has two
    cat, _ = tables
    orders = cat.load_table("sales.orders")
    snapshot = orders.metadata.current_snapshot().snapshot_id
    sources = IcebergSources()

    def kept(where: str) -> int:
        prune = row_filter(f"SELECT * FROM sales.orders WHERE {where}", orders.schema())
        return len(sources.data_files(orders, snapshot, prune))

    assert kept("id = 4") == 1 and kept("id = 1") == 1 and kept("id >= 1") == 2
    assert sources._every_data_file(orders, snapshot) is None  # not kept, and remembered so
