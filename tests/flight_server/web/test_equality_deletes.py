"""Equality and position delete files (hand-written, committed over the REST catalog as a row
delta, as Flink or Iceberg's Java RowDelta would) read by icefloe: single and composite keys,
NULL keys (NULL equals NULL), a key column renamed after the delete was written (matched by
field id), Iceberg's sequence-number rule (a key appended after the delete survives), counts in
the commit log, change scans, the embedded API; and a randomized sequence of appends, deletes
and updates checked against a DuckDB table at every snapshot (time travel included).

Equality deletes are written here with pyarrow + pyiceberg's manifest writer
(tests/row_deletes_support); test_java_equality_deletes has Iceberg's own Java writer."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

import icefloe
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_support import commit_records, head_seq, rest_server, rest_url, sql
from tests.row_deletes_support import data_files, equality_delete, position_delete
from tests.servers import ServerProcess

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False),
                NestedField(3, "v", LongType(), required=False))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("eqdel") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> RestCatalog:
    catalog = RestCatalog("icefloe", uri=rest_url(server))
    catalog.create_namespace("eq")
    return catalog


def _rows(server: ServerProcess, table: str, where: str = "") -> list[tuple[Any, ...]]:
    got = sql(server.location, f"SELECT id, name, v FROM {table} {where}")
    return sorted(tuple(r.values()) for r in got.to_pylist())


def _new(rest: RestCatalog, name: str, rows: list[tuple[Any, ...]]) -> Any:
    table = rest.create_table(f"eq.{name}", SCHEMA)
    table.append(_arrow(rows))
    return rest.load_table(f"eq.{name}")


def _arrow(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "name": pa.array([r[1] for r in rows], pa.string()),
                     "v": pa.array([r[2] for r in rows], pa.int64())})


BASE = [(i, None if i % 5 == 0 else f"n{i % 4}", i * 10) for i in range(20)]


def test_single_key(rest: RestCatalog, server: ServerProcess) -> None:
    table = _new(rest, "single", BASE)
    before = head_seq(server.warehouse)
    equality_delete(table, {"id": [3, 5, 99]})
    want = [r for r in BASE if r[0] not in (3, 5)]
    assert _rows(server, "eq.single") == sorted(want)
    assert _rows(server, "eq.single", "WHERE id < 6") == sorted(r for r in want if r[0] < 6)
    record = [r for r in commit_records(server.warehouse, before)][-1]
    # Equality deletes count their delete rows (3 keys, of which one matches nothing).
    assert (record.added_rows, record.deleted_rows, record.data_change) == (0, 3, True)
    # Rows appended after the delete are not deleted by it (sequence numbers).
    rest.load_table("eq.single").append(_arrow([(3, "again", 1)]))
    assert (3, "again", 1) in _rows(server, "eq.single")
    lake = icefloe.open(str(server.warehouse), read_only=True)
    try:
        scanned = pa.table(lake.table("eq.single").scan())
    finally:
        lake.close()
    assert sorted(scanned.column("id").to_pylist()) == sorted([r[0] for r in want] + [3])


def test_feed_counts_row_deletes(rest: RestCatalog, server: ServerProcess) -> None:
    """commits.v1 events carry the true counts and ``data_change``."""
    table = _new(rest, "feedcount", BASE)
    start = head_seq(server.warehouse)
    equality_delete(table, {"id": [1, 2]})
    table = rest.load_table("eq.feedcount")
    (path, _count), = data_files(table)
    position_delete(table, {path: [5, 6, 7]})
    with rest.load_table("eq.feedcount").update_schema() as update:
        update.add_column("extra", StringType())
    with FeedReader(server.location, {"feed": "commits.v1", "after": start, "tables": ["eq.feedcount"]}) as feed:
        events = feed.events(3)
    got = [(e["operation"], e["added_rows"], e["deleted_rows"], e["added_files"], e["data_change"]) for e in events]
    assert got == [("delete", 0, 2, 1, True), ("delete", 0, 3, 1, True), ("schema", None, None, None, False)]


def test_rows_feed_over_a_table_with_deletes(rest: RestCatalog, server: ServerProcess) -> None:
    """rows.v1 streams appends of a table with delete files and announces the row delta."""
    table = _new(rest, "rowsfeed", BASE[:4])
    start = head_seq(server.warehouse) - 1  # the append's commit included
    equality_delete(table, {"id": [0]})
    rest.load_table("eq.rowsfeed").append(_arrow([(100, "x", 1)]))
    reader = FeedReader(server.location, {"feed": "rows.v1", "after": start, "tables": ["eq.rowsfeed"],
                                          "heartbeat_ms": 100})
    with reader:
        announced = []
        for _ in range(3):
            rows: list[dict[str, Any]] = []
            while True:
                msg = reader.next()
                if msg.batch is not None:
                    rows.extend(msg.batch.to_pylist())
                if msg.metadata is not None and "commit" in msg.metadata:
                    announced.append((sorted(r["id"] for r in rows), msg.metadata["commit"]))
                    break
    assert [a[0] for a in announced] == [[0, 1, 2, 3], [], [100]]
    assert (announced[1][1]["operation"], announced[1][1]["deleted_rows"]) == ("delete", 1)


def test_icefloe_delete_over_deletes_changelog_and_files_table(rest: RestCatalog, server: ServerProcess) -> None:
    """A copy-on-write DELETE of icefloe over a file with deletes: the change scan lists only
    the rows it removed (not those the delete files had removed); ``$files`` lists every file."""
    table = _new(rest, "cowover", BASE)
    equality_delete(table, {"id": [0, 1, 2]})
    start = head_seq(server.warehouse)
    sql(server.location, "DELETE FROM eq.cowover WHERE id >= 15")
    end = head_seq(server.warehouse)
    client = flight.FlightClient(server.location)
    try:
        request = {"changes": "eq.cowover", "after": start, "until": end, "include": "all"}
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        rows = [r for e in info.endpoints for r in client.do_get(e.ticket).read_all().to_pylist()]
    finally:
        client.close()
    assert sorted((r["_operation"], r["id"]) for r in rows) == [("delete", i) for i in range(15, 20)]
    equality_delete(rest.load_table("eq.cowover"), {"id": [3]})
    files = sql(server.location, 'SELECT content FROM eq."cowover$files"').column("content").to_pylist()
    assert sorted(files) == ["data", "equality_deletes", "equality_deletes"]


def test_partition_scoped_equality_deletes(rest: RestCatalog, server: ServerProcess) -> None:
    """An equality delete in a partitioned spec applies to its own partition only."""
    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="v"))
    table = rest.create_table("eq.parted", SCHEMA, partition_spec=spec)
    rows = [(i, "n", i % 2) for i in range(8)]
    table.append(_arrow(rows))
    table = rest.load_table("eq.parted")
    equality_delete(table, {"id": [0, 1, 2, 3]}, partition=Record(0))  # partition v = 0
    assert _rows(server, "eq.parted") == sorted(r for r in rows if r[0] not in (0, 2))


def test_composite_key_and_nulls(rest: RestCatalog, server: ServerProcess) -> None:
    table = _new(rest, "composite", BASE)
    # (id, name): (1, 'n1') matches; (2, 'zz') does not; (10, NULL) matches the NULL name of id 10.
    equality_delete(table, {"id": [1, 2, 10], "name": ["n1", "zz", None]})
    want = [r for r in BASE if (r[0], r[1]) not in ((1, "n1"), (10, None))]
    assert _rows(server, "eq.composite") == sorted(want)
    # A NULL-only key: every row whose name is NULL.
    equality_delete(rest.load_table("eq.composite"), {"name": [None]})
    want = [r for r in want if r[1] is not None]
    assert _rows(server, "eq.composite") == sorted(want)
    assert sql(server.location, "SELECT count(*) AS n FROM eq.composite").column("n")[0].as_py() == len(want)


def test_renamed_key_column(rest: RestCatalog, server: ServerProcess) -> None:
    table = _new(rest, "renamed", BASE)
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table = rest.load_table("eq.renamed")
    equality_delete(table, {"label": ["n2"]})  # written under the new name, field id 2
    got = sql(server.location, "SELECT id, label FROM eq.renamed").to_pylist()
    assert sorted(r["id"] for r in got) == sorted(r[0] for r in BASE if r[1] != "n2")


def test_change_scan_shows_equality_and_position_deletes(rest: RestCatalog, server: ServerProcess) -> None:
    table = _new(rest, "changes", BASE)
    start = head_seq(server.warehouse)
    equality_delete(table, {"id": [4, 7]})
    table = rest.load_table("eq.changes")
    (path, _count), = data_files(table)
    position_delete(table, {path: [0, 1, 4]})  # ids 0 and 1; row 4 (id 4) was already deleted
    end = head_seq(server.warehouse)
    client = flight.FlightClient(server.location)
    try:
        request = {"changes": "eq.changes", "after": start, "until": end, "include": "all"}
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        rows = [r for e in info.endpoints for r in client.do_get(e.ticket).read_all().to_pylist()]
    finally:
        client.close()
    deletes = sorted((r["_seq"] - start, r["id"]) for r in rows if r["_operation"] == "delete")
    assert deletes == [(1, 4), (1, 7), (2, 0), (2, 1)]
    assert _rows(server, "eq.changes") == sorted(r for r in BASE if r[0] not in (0, 1, 4, 7))


@pytest.mark.parametrize("seed", [38, 7, 2026])
def test_random_sequences_match_duckdb(rest: RestCatalog, server: ServerProcess, seed: int) -> None:
    """Appends, equality deletes, position deletes, icefloe UPDATE / DELETE (copy-on-write over
    the delete files) in random order: icefloe's rows equal a DuckDB table's at every snapshot."""
    rng = random.Random(seed)
    # Every kind of change twice, in a random order, after two appends.
    plan = ["append", "eq", "eq2", "pos", "update", "delete"] * 2
    rng.shuffle(plan)
    plan = ["append", "append", *plan]
    reference = duckdb.connect()
    reference.execute("CREATE TABLE t (id BIGINT, name VARCHAR, v BIGINT)")
    tname = f"eq.random{seed}"
    table = rest.create_table(tname, SCHEMA)
    next_id = 0
    history: list[tuple[int, list[tuple[Any, ...]]]] = []

    def expected() -> list[tuple[Any, ...]]:
        return sorted(reference.execute("SELECT id, name, v FROM t").fetchall(), key=repr)

    for step, kind in enumerate(plan):
        table = rest.load_table(tname)
        if kind == "append":
            count = rng.randrange(5, 30)
            rows = [(next_id + i, rng.choice([None, "a", "b", "c"]), rng.randrange(5)) for i in range(count)]
            next_id += len(rows)
            table.append(_arrow(rows))
            reference.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        elif kind == "eq":
            keys = rng.sample(range(max(next_id, 1)), min(5, next_id))
            equality_delete(table, {"id": keys})
            reference.execute(f"DELETE FROM t WHERE id IN ({', '.join(map(str, keys)) or 'NULL'})")
        elif kind == "eq2":
            name, v = rng.choice([None, "a", "b"]), rng.randrange(5)
            equality_delete(table, {"name": [name], "v": [v]})
            reference.execute("DELETE FROM t WHERE name IS NOT DISTINCT FROM ? AND v = ?", [name, v])
        elif kind == "pos":
            path, count = rng.choice(data_files(table))
            picked = sorted(rng.sample(range(count), min(3, count)))
            # Which rows those positions are: read the raw file (positions count every row).
            raw = table.io.new_input(path).open()
            import pyarrow.parquet as pq

            ids = pq.read_table(raw).column("id").to_pylist()
            position_delete(table, {path: picked})
            gone = [ids[p] for p in picked]
            reference.execute(f"DELETE FROM t WHERE id IN ({', '.join(map(str, gone))})")
        elif kind == "update":
            v = rng.randrange(5)
            sql(server.location, f"UPDATE {tname} SET name = 'u{step}' WHERE v = {v}")
            reference.execute(f"UPDATE t SET name = 'u{step}' WHERE v = {v}")
        else:
            v = rng.randrange(5)
            sql(server.location, f"DELETE FROM {tname} WHERE v = {v} AND id % 2 = 0")
            reference.execute(f"DELETE FROM t WHERE v = {v} AND id % 2 = 0")
        snapshot = rest.load_table(tname).metadata.current_snapshot_id
        got = [tuple(r.values()) for r in sql(server.location, f"SELECT id, name, v FROM {tname}").to_pylist()]
        assert sorted(got, key=repr) == expected(), (step, kind)
        history.append((snapshot, expected()))
    for snapshot, rows in history:  # time travel: every snapshot still reads as it did
        got = sql(server.location, f"SELECT id, name, v FROM {tname} AT (VERSION => {snapshot})").to_pylist()
        assert sorted((tuple(r.values()) for r in got), key=repr) == rows
