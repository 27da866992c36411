"""The same read / stream / write round trip under Spark Connect (SparkSession.builder.remote("local[2]")):
Spark Connect pickles the data source class to the server, which imports pyspark_icefloe from
this environment."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from servers import ServerProcess
from spark_support import do_put, make_session, serving_tables


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_session(remote=True)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving_tables(tmp_path_factory.mktemp("spark-connect") / "warehouse", ("ns.r", "ns.w")) as proc:
        yield proc


def _rows(start: int, n: int) -> pa.Table:
    values = range(start, start + n)
    return pa.table({"x": pa.array(values, pa.int64()), "s": [f"v{i}" for i in values]})


def test_connect_batch_read_and_stream(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    first = do_put(server.location, "ns.r", _rows(0, 50))
    df = (spark.read.format("icefloe").option("uri", server.location).option("table", "ns.r")
          .option("targetPartitionBytes", "1").load())
    assert sorted(r.x for r in df.collect()) == list(range(50))
    stream = (spark.readStream.format("icefloe").option("uri", server.location).option("table", "ns.r")
              .option("startingOffsets", str(first["commit_seq"] - 1)).load())
    query = (stream.writeStream.format("memory").queryName("icefloe_connect")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="0 seconds").start())
    try:
        do_put(server.location, "ns.r", _rows(50, 25))
        deadline = time.monotonic() + 90
        while spark.sql("SELECT count(*) AS n FROM icefloe_connect").collect()[0].n < 75:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, query.status
            time.sleep(0.2)
    finally:
        query.stop()
    got = sorted(r.x for r in spark.sql("SELECT x FROM icefloe_connect").collect())
    assert got == list(range(75))


def test_connect_write_append_and_overwrite(spark: Any, server: ServerProcess) -> None:
    """df.write under Spark Connect: the writer is pickled to the Connect server like the reader;
    an append is one commit, an overwrite one more, which replaces the rows."""
    from spark_support import sql

    def write(start: int, n: int, mode: str) -> None:
        frame = spark.range(start, start + n, numPartitions=3).selectExpr("id AS x", "concat('v', id) AS s")
        frame.write.format("icefloe").option("uri", server.location).option("table", "ns.w").mode(mode).save()

    def snapshots() -> list[str]:
        result = sql(server.location, 'SELECT operation FROM ns."w$snapshots" ORDER BY committed_at')
        return [str(op) for op in result.column("operation").to_pylist()]

    write(0, 300, "append")
    assert sorted(sql(server.location, "SELECT x FROM ns.w").column("x").to_pylist()) == list(range(300))
    write(1000, 30, "overwrite")
    assert sorted(sql(server.location, "SELECT x FROM ns.w").column("x").to_pylist()) == list(range(1000, 1030))
    assert snapshots() == ["append", "overwrite"], "one snapshot per job"
