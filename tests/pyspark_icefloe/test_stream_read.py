"""spark.readStream.format("icefloe"): every appended row exactly once while the query runs and
across a restart from its checkpoint, non-append commits by onNonAppend, an expired cursor."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from servers import ServerProcess, make_tables, serving
from spark_support import do_put, sql


def _make(warehouse: Path, tables: tuple[str, ...]) -> None:
    make_tables(warehouse, tables, pa.schema([pa.field("x", pa.int64())]))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("spark-stream") / "warehouse"
    _make(warehouse, ("ns.s", "ns.other", "ns.na_fail", "ns.na_skip", "ns.na_changes", "ns.ts", "ns.compact"))
    with serving(warehouse) as proc:
        yield proc


def append(server: ServerProcess, table: str, values: list[int]) -> int:
    return int(do_put(server.location, table, pa.table({"x": pa.array(values, pa.int64())}))["commit_seq"])


class Sink:
    """A foreachBatch sink keeping each batch's rows by batch id; a replayed batch must match."""

    def __init__(self, first_batch_s: float = 0.0) -> None:
        self.batches: dict[int, list[int]] = {}
        self.replays = 0
        self.first_batch_s = first_batch_s  # a slow first batch: commits pile up behind it
        self.busy = False

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = sorted(r.x for r in frame.collect())
        if not self.busy and rows and not any(self.batches.values()):
            self.busy = True  # the first batch with rows is running
            time.sleep(self.first_batch_s)
        if batch_id in self.batches:
            self.replays += 1
            assert self.batches[batch_id] == rows, "a replayed batch reads the same rows"
        self.batches[batch_id] = rows

    def rows(self) -> list[int]:
        return sorted(x for rows in self.batches.values() for x in rows)


def start(spark: Any, server: ServerProcess, table: str, sink: Sink, checkpoint: Path, **options: str) -> Any:
    reader = spark.readStream.format("icefloe").option("uri", server.location).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds").start())


def wait_for(query: Any, condition: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; status {query.status}")
        time.sleep(0.1)


def failure(query: Any) -> str:
    """The error the query ended with (it must end within 90 s)."""
    try:
        query.awaitTermination(90)
    except Exception as exc:  # pyspark raises the query's StreamingQueryException here
        return str(exc)
    return str(query.exception())


@pytest.mark.spark_latest  # 4.2+ hands latestOffset the start: the other code path
def test_every_row_once_while_running_and_after_a_restart(spark: Any, server: ServerProcess,
                                                          tmp_path: Path) -> None:
    before = [append(server, "ns.s", [i]) for i in range(3)]
    append(server, "ns.other", [999])  # another table's commit moves the head, not this stream
    sink = Sink()
    query = start(spark, server, "ns.s", sink, tmp_path / "cp", startingOffsets=str(before[0] - 1))
    try:
        for i in range(3, 8):
            append(server, "ns.s", [i, i + 100])
        wait_for(query, lambda: len(sink.rows()) == 13)
    finally:
        query.stop()
    assert sink.rows() == sorted([0, 1, 2] + [i for k in range(3, 8) for i in (k, k + 100)])
    for i in range(8, 11):
        append(server, "ns.s", [i])
    query = start(spark, server, "ns.s", sink, tmp_path / "cp", startingOffsets=str(before[0] - 1))
    try:
        wait_for(query, lambda: len(sink.rows()) >= 16)
        time.sleep(1.5)  # a second pass of the feed would show up as duplicates here
    finally:
        query.stop()
    expected = sorted(list(range(11)) + list(range(103, 108)))
    assert sink.rows() == expected, "every appended row exactly once, none twice"


def test_starting_timestamp_starts_at_the_first_commit_at_or_after_it(spark: Any, server: ServerProcess,
                                                                      tmp_path: Path) -> None:
    from datetime import UTC, datetime

    append(server, "ns.ts", [0])
    append(server, "ns.ts", [1])
    time.sleep(1.2)
    when = datetime.now(UTC).isoformat()
    time.sleep(0.2)
    append(server, "ns.ts", [2])
    append(server, "ns.ts", [3])
    sink = Sink()
    query = start(spark, server, "ns.ts", sink, tmp_path / "cp", startingTimestamp=when)
    try:
        wait_for(query, lambda: len(sink.rows()) >= 2)
        append(server, "ns.ts", [4])
        wait_for(query, lambda: len(sink.rows()) >= 3)
        time.sleep(1.0)
    finally:
        query.stop()
    assert sink.rows() == [2, 3, 4]


def _maintain(server: ServerProcess, table: str) -> dict[str, Any]:
    import json

    import pyarrow.flight as flight

    client = flight.FlightClient(server.location)
    try:
        results = list(client.do_action(flight.Action("icefloe.maintain", json.dumps({"table": table}).encode())))
    finally:
        client.close()
    return dict(json.loads(results[-1].body.to_pybytes()))


def test_compaction_during_the_stream_gives_every_row_once(spark: Any, server: ServerProcess,
                                                           tmp_path: Path) -> None:
    """Compaction rewrites the appends' small files mid-stream (a ``replace`` commit, no data change):
    the stream neither fails (onNonAppend=fail) nor reads the rewritten rows again, also after a restart."""
    first = append(server, "ns.compact", [0])
    sink = Sink()
    query = start(spark, server, "ns.compact", sink, tmp_path / "cp", startingOffsets=str(first - 1))
    try:
        for i in range(1, 20):
            append(server, "ns.compact", [i])
        wait_for(query, lambda: len(sink.rows()) >= 10)
        compacted = _maintain(server, "ns.compact")
        for i in range(20, 25):
            append(server, "ns.compact", [i])
        wait_for(query, lambda: len(sink.rows()) >= 25)
        time.sleep(1.0)
    finally:
        query.stop()
    # Background compaction (every ~16 small files) or the explicit run rewrote the files.
    files = sql(server.location, 'SELECT count(*) AS n FROM ns."compact$files"').column("n")[0].as_py()
    compactions = [line for line in server.log_lines if "compacted" in line and "ns.compact" in line]
    assert files < 25 and compactions, (compacted, files, compactions)
    assert sink.rows() == list(range(25))
    _maintain(server, "ns.compact")
    append(server, "ns.compact", [25])
    query = start(spark, server, "ns.compact", sink, tmp_path / "cp", startingOffsets=str(first - 1))
    try:
        wait_for(query, lambda: len(sink.rows()) >= 26)
        time.sleep(1.0)
    finally:
        query.stop()
    assert sink.rows() == list(range(26)), "after a restart from the checkpoint: every row once"


def test_on_non_append_fail_skip_and_changes(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    for table in ("ns.na_fail", "ns.na_skip", "ns.na_changes"):
        append(server, table, [1, 2])
        sql(server.location, f"DELETE FROM {table} WHERE x = 1")
        append(server, table, [3])
    sink = Sink()
    failing = start(spark, server, "ns.na_fail", sink, tmp_path / "f", startingOffsets="earliest")
    try:
        error = failing and failure(failing)
        assert "onNonAppend" in error and "delete" in error, error
    finally:
        failing.stop()
    skipping = Sink()
    query = start(spark, server, "ns.na_skip", skipping, tmp_path / "s", startingOffsets="earliest",
                  onNonAppend="skip")
    try:
        wait_for(query, lambda: len(skipping.rows()) == 3)
    finally:
        query.stop()
    assert skipping.rows() == [1, 2, 3], "the appends' rows; the delete is skipped"
    changes: list[tuple[int, str]] = []

    def collect(frame: Any, batch_id: int) -> None:
        changes.extend((r.x, r._operation) for r in frame.collect())

    query = (spark.readStream.format("icefloe").option("uri", server.location).option("table", "ns.na_changes")
             .option("startingOffsets", "earliest").option("onNonAppend", "changes").load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "c"))
             .trigger(processingTime="0 seconds").start())
    try:
        wait_for(query, lambda: len(changes) == 4)
    finally:
        query.stop()
    assert sorted(changes) == [(1, "append"), (1, "delete"), (2, "append"), (3, "append")]


def test_expired_cursor_fails_unless_failOnDataLoss_is_false(spark: Any, tmp_path: Path) -> None:  # noqa: N802
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    _make(warehouse, ("ns.t",))
    cat = RocksCatalog("t", warehouse=str(warehouse))
    for i in range(4):
        cat.load_table("ns.t").append(pa.table({"x": pa.array([i], pa.int64())}))
    head = cat.log.head()
    cat.log.trim(head - 2)
    cat.close()
    with serving(warehouse) as proc:
        sink = Sink()
        query = start(spark, proc, "ns.t", sink, tmp_path / "a", startingOffsets="0")
        try:
            error = failure(query)
            assert "cursor expired" in error and "failOnDataLoss" in error, error
        finally:
            query.stop()
        lossy = Sink()
        query = start(spark, proc, "ns.t", lossy, tmp_path / "b", startingOffsets="0", failOnDataLoss="false")
        try:
            wait_for(query, lambda: len(lossy.rows()) == 2)
        finally:
            query.stop()
        assert lossy.rows() == [2, 3], "the rows still kept, after the trimmed ones"


def test_commit_events_stream(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    seen: list[tuple[int, str, str]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend((r.seq, r.table, r.operation) for r in frame.collect())

    first = append(server, "ns.other", [1])
    query = (spark.readStream.format("icefloe-commits").option("uri", server.location)
             .option("tables", "ns.other, ns.s").option("startingOffsets", str(first - 1)).load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="0 seconds").start())
    try:
        second = append(server, "ns.s", [5])
        append(server, "ns.na_skip", [5])  # not subscribed
        third = append(server, "ns.other", [2])
        wait_for(query, lambda: len(seen) >= 3)
        time.sleep(1.0)
    finally:
        query.stop()
    assert seen == [(first, "other", "append"), (second, "s", "append"), (third, "other", "append")]
