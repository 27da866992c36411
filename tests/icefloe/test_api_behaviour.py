"""One behaviour suite over both backends: in-process (icefloe.open) and remote (icefloe.connect)."""

from __future__ import annotations

import threading

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import icefloe

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()), pa.field("s", pa.string())])


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "v": [i * 10 for i in ids], "s": [f"r{i}" for i in ids]}, schema=SCHEMA)


def sorted_ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_namespaces_and_tables(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    assert t.schema.names == ["id", "v", "s"]
    assert lake.table(f"{ns}.t").name == f"{ns}.t"
    with pytest.raises(icefloe.AlreadyExists):
        lake.create_namespace(ns)
    with pytest.raises(icefloe.AlreadyExists):
        lake.create_table(f"{ns}.t", schema=SCHEMA)
    with pytest.raises(icefloe.NotFound):
        lake.table(f"{ns}.missing")
    with pytest.raises(icefloe.NotFound):
        lake.create_table("no_such_ns.t", schema=SCHEMA)
    with pytest.raises(icefloe.InvalidArgument):
        lake.create_table(f"{ns}.a/b", schema=SCHEMA)
    with pytest.raises(icefloe.Error):  # every failure is one of the hierarchy
        lake.table("nodots")


def test_append_returns_the_commit_event_and_scan_reads_it(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    first = t.append(rows(3))
    assert (first.operation, first.namespace, first.table, first.rows, first.added_rows) == ("append", ns, "t", 3, 3)
    assert first.snapshot_id is not None and not first.duplicate
    second = t.append(pl.DataFrame({"id": [3, 4], "v": [30, 40], "s": ["r3", "r4"]}))  # polars, string views
    third = t.append(duckdb.sql("SELECT 5::BIGINT AS id, 50::BIGINT AS v, 'r5' AS s"))  # a DuckDB relation
    assert first.seq < second.seq < third.seq
    assert sorted_ids(t.scan().to_table()) == [0, 1, 2, 3, 4, 5]
    picked = t.scan(columns=["s", "id"], filter="v >= 20 AND id < 5")
    assert picked.schema.names == ["s", "id"]
    assert sorted(picked.to_table().column("s").to_pylist()) == ["r2", "r3", "r4"]
    # Time travel: the first snapshot holds the first append only.
    assert sorted_ids(t.scan(snapshot_id=first.snapshot_id).to_table()) == [0, 1, 2]
    # An __arrow_c_array__ producer (a record batch) is accepted too.
    t.append(rows(1, start=6).to_batches()[0])
    assert t.scan().to_table().num_rows == 7


def test_scan_is_a_pinned_arrow_stream(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    t.append(rows(100))
    scan = t.scan()
    t.append(rows(5, start=100))  # after the scan was made: not in it
    assert pl.DataFrame(scan).height == 100
    assert duckdb.sql("SELECT count(*), sum(v) FROM scan").fetchall() == [(100, sum(i * 10 for i in range(100)))]
    assert pa.table(scan).num_rows == 100
    assert sum(b.num_rows for b in scan) == 100
    assert t.scan().to_reader().read_all().num_rows == 105


def test_idempotency_key_commits_once(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    first = t.append(rows(2), idempotency_key="batch-1")
    again = t.append(rows(2), idempotency_key="batch-1")
    assert again.duplicate and again.seq == first.seq and again.snapshot_id == first.snapshot_id
    assert t.scan().to_table().num_rows == 2
    with pytest.raises(icefloe.InvalidArgument):
        t.append(rows(1), idempotency_key="bad\x01key")


def test_bad_input_is_refused_and_commits_nothing(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    head = lake.head()
    with pytest.raises(icefloe.InvalidArgument):
        t.append(pa.table({"id": ["not a number"]}))
    with pytest.raises(icefloe.InvalidArgument):
        t.append([1, 2, 3])
    with pytest.raises(icefloe.InvalidArgument):
        t.scan(columns=["nope"]).to_table()
    with pytest.raises(icefloe.InvalidArgument):
        t.scan(filter="v > AND").to_table()
    with pytest.raises(icefloe.NotFound):
        lake.table(f"{ns}.t").scan(snapshot_id=12345).to_table()
    assert lake.head() == head
    assert t.scan().to_table().num_rows == 0


def test_changes_are_the_rows_of_a_commit_range(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    e1 = t.append(rows(2))
    e2 = t.append(rows(3, start=2))
    e3 = t.append(rows(1, start=5))
    middle = t.changes(after=e1.seq, until=e2.seq).read_all()
    assert sorted_ids(middle) == [2, 3, 4] and set(middle.column("_seq").to_pylist()) == {e2.seq}
    assert sorted_ids(pa.Table.from_batches(list(t.changes(after=e1.seq)))) == [2, 3, 4, 5]
    assert sorted_ids(t.changes(after=e1.seq - 1, until=e3.seq).read_all()) == list(range(6))
    with pytest.raises(icefloe.InvalidArgument):
        t.changes(after=e1.seq, until=lake.head() + 10).read_all()


def test_subscribe_yields_every_commit_once_and_resumes(lake: icefloe.Lake, ns: str) -> None:
    t = lake.create_table(f"{ns}.t", schema=SCHEMA)
    other = lake.create_table(f"{ns}.other", schema=SCHEMA)
    start = lake.head()
    seen: list[int] = []
    stop = threading.Event()

    def follow() -> None:
        for event in t.subscribe(after=start, stop=stop):
            assert event.table == "t"
            seen.append(event.seq)
            if len(seen) == 3:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    appended = []
    for i in range(3):
        other.append(rows(1, start=100 + i))  # another table: not seen
        appended.append(t.append(rows(1, start=i)).seq)
    reader.join(30)
    stop.set()
    assert seen == appended
    # Resume after the first: the other two again, exactly once, in order.
    resumed = []
    for event in t.subscribe(after=appended[0]):
        resumed.append(event.seq)
        if len(resumed) == 2:
            break
    assert resumed == appended[1:]
    with pytest.raises(icefloe.NotFound):
        next(iter(lake.table(f"{ns}.t").backend.subscribe(f"{ns}.missing", "latest", stop)))


def test_pipe_moves_each_row_once(lake: icefloe.Lake, ns: str) -> None:
    source = lake.create_table(f"{ns}.orders", schema=SCHEMA)
    sink = lake.create_table(f"{ns}.daily", schema=pa.schema([("id", pa.int64()), ("total", pa.int64())]))
    for i in range(4):
        source.append(rows(3, start=i * 3))

    def double(table: pa.Table) -> pa.Table:
        return pa.table({"id": table["id"], "total": pa.compute.multiply(table["v"], 2)})

    stats = icefloe.pipe(source=source, transform=double, sink=sink, columns={"total": ["v"]},
                         checkpoint="daily-job", once=True, max_commits=2)
    assert stats.source_rows == 12 and stats.sink_rows == 12
    assert icefloe.checkpoint_of(sink, "daily-job") is not None
    again = icefloe.pipe(source=source, transform=double, sink=sink, checkpoint="daily-job", once=True)
    assert again.commits == 0
    source.append(rows(2, start=100))
    icefloe.pipe(source=source, transform=double, sink=sink, checkpoint="daily-job", once=True)
    got = sink.scan().to_table()
    assert sorted_ids(got) == [*range(12), 100, 101]
    assert sorted(got.column("total").to_pylist()) == sorted(i * 20 for i in [*range(12), 100, 101])
    with pytest.raises(icefloe.InvalidArgument):
        icefloe.pipe(source=source, sink=sink, checkpoint="bad name!", once=True)


def test_a_live_pipe_follows_the_source(lake: icefloe.Lake, ns: str) -> None:
    source = lake.create_table(f"{ns}.src", schema=SCHEMA)
    sink = lake.create_table(f"{ns}.dst", schema=SCHEMA)
    stop = threading.Event()
    runner = threading.Thread(target=icefloe.pipe, kwargs={"source": source, "sink": sink, "checkpoint": "live",
                                                           "stop": stop})
    runner.start()
    try:
        for i in range(3):
            source.append(rows(2, start=i * 2))
        for _ in range(300):
            if sink.scan().to_table().num_rows == 6:
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        runner.join(30)
    assert sorted_ids(sink.scan().to_table()) == list(range(6))
