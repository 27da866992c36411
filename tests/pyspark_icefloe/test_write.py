"""df.write / writeStream .format("icefloe") on two-phase appends: one commit per job, overwrite,
a task that fails and is retried (no duplicates), an aborted job (nothing visible), and a
streaming micro-batch replayed after a crash (a duplicate, not a second append)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

# The Python workers cannot import this test module: ship its functions by value.
from pyspark import cloudpickle  # noqa: E402
from servers import ServerProcess
from spark_support import do_put, make_session, serving_tables, sql

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_session(master="local[2,3]")  # a failed task is retried
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tables = ("ns.w", "ns.retry", "ns.abort", "ns.src", "ns.dst")
    with serving_tables(tmp_path_factory.mktemp("spark-write") / "warehouse", tables) as proc:
        yield proc


def _write(df: Any, server: ServerProcess, table: str, mode: str = "append") -> None:
    df.write.format("icefloe").option("uri", server.location).option("table", table).mode(mode).save()


def _xs(server: ServerProcess, table: str) -> list[int]:
    return sorted(sql(server.location, f"SELECT x FROM {table}").column("x").to_pylist())


def _commits(server: ServerProcess, table: str) -> int:
    namespace, _, name = table.partition(".")
    return int(sql(server.location, f'SELECT count(*) AS n FROM {namespace}."{name}$snapshots"').column("n")[0].as_py())


def _frame(spark: Any, start: int, n: int, parts: int = 4) -> Any:
    return spark.range(start, start + n, numPartitions=parts).selectExpr("id AS x", "concat('v', id) AS s")


def test_append_is_one_commit_and_overwrite_replaces(spark: Any, server: ServerProcess) -> None:
    _write(_frame(spark, 0, 1000), server, "ns.w")
    assert _xs(server, "ns.w") == list(range(1000))
    assert _commits(server, "ns.w") == 1, "four tasks, one snapshot"
    _write(_frame(spark, 5000, 10, parts=2), server, "ns.w", mode="overwrite")
    assert _xs(server, "ns.w") == list(range(5000, 5010))
    _write(_frame(spark, 0, 0, parts=1), server, "ns.w")
    assert _commits(server, "ns.w") == 3, "an empty append commits nothing (the overwrite is DELETE + append)"


def _fail_first_attempt_midway(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    for n, batch in enumerate(batches):
        if n == 1 and context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("killed on its first attempt")
        yield batch


def test_a_task_that_fails_and_is_retried_writes_no_duplicates(spark: Any, server: ServerProcess) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = _frame(spark, 0, 2000).mapInArrow(_fail_first_attempt_midway, "x long, s string")
        _write(df, server, "ns.retry")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert _xs(server, "ns.retry") == list(range(2000))
    assert _commits(server, "ns.retry") == 1


def _always_fail_partition_one(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    for batch in batches:
        if context is not None and context.partitionId() == 1:
            raise RuntimeError("this partition always fails")
        yield batch


def test_an_aborted_job_leaves_nothing_visible(spark: Any, server: ServerProcess) -> None:
    do_put(server.location, "ns.abort", pa.table({"x": pa.array([-1], pa.int64()), "s": ["before"]}))
    df = _frame(spark, 0, 400, parts=2).mapInArrow(_always_fail_partition_one, "x long, s string")
    with pytest.raises(Exception, match="always fails"):
        _write(df, server, "ns.abort")
    assert _xs(server, "ns.abort") == [-1]
    assert _commits(server, "ns.abort") == 1


def test_stream_sink_replayed_batch_is_a_duplicate(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    first = do_put(server.location, "ns.src", pa.table({"x": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    checkpoint = tmp_path / "cp"

    def run(until_rows: int) -> None:
        query = (spark.readStream.format("icefloe").option("uri", server.location).option("table", "ns.src")
                 .option("startingOffsets", str(first["commit_seq"] - 1)).load()
                 .writeStream.format("icefloe").option("uri", server.location).option("table", "ns.dst")
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + 90
            while len(_xs(server, "ns.dst")) < until_rows or query.lastProgress is None:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, query.status
                time.sleep(0.3)
            time.sleep(1.0)
        finally:
            query.stop()
            stopped = time.monotonic() + 60
            while spark.streams.active and time.monotonic() < stopped:
                time.sleep(0.2)  # the next run may use the checkpoint only once this one let go

    run(2)
    do_put(server.location, "ns.src", pa.table({"x": pa.array([3], pa.int64()), "s": ["c"]}))
    run(3)
    assert _xs(server, "ns.dst") == [1, 2, 3]
    # A crash after the sink committed but before Spark recorded the batch: Spark replays it.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    commits_before = _commits(server, "ns.dst")
    run(3)
    assert (checkpoint / "commits" / str(last)).exists(), "Spark ran the batch again"
    assert _xs(server, "ns.dst") == [1, 2, 3], "the replayed batch was answered as a duplicate"
    assert _commits(server, "ns.dst") == commits_before
