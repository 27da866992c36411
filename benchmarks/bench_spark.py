"""The Spark data source against baselines in the same run, on one local[2] Spark session.

- Batch: ``spark.read.format("icefloe")`` count + sum over the table vs ``spark.read.parquet``
  of the same data files (target >= 0.7x), alternating rounds, median time. Beside them, the
  floor of the Python Data Source API itself: a source that does no I/O (it yields one
  in-memory batch of the table's own first rows, same schema and batch size as the server's,
  over and over until it has yielded as many rows). No Python data source can be faster than
  that floor; ``floor_ratio`` (parquet / floor) is the best ratio any such connector can
  reach here, and ``batch_vs_floor`` is icefloe's share of it.
- Streaming: commit ack -> row visible in a ``foreachBatch`` sink, p50 / p99 over N commits,
  icefloe's feed-driven source (bounded wait in latestOffset, trigger 0 s) vs the same source
  polled every second (``latestOffsetWaitMs=0``, trigger 1 s: what Iceberg's Spark source does);
  target p50 <= 0.3x.
- Write: ``df.write.format("icefloe")`` of the rows vs one client's DoPut of the same rows.

Each of ``--runs`` runs (default 3) measures all three in the same session and server; the table
shows every run and the median of the runs, with the load average at each run's end.

Usage: python benchmarks/bench_spark.py [--rows 10000000] [--files 8] [--rounds 3] [--commits 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "pyspark_icefloe"))

from bench_flightsql_scan import make_table  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402
from spark_support import do_put, make_session  # noqa: E402


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


class FloorSource(DataSource):  # type: ignore[misc]
    """``format("icefloe-bench-floor")``, options ``file`` (a data file) and ``rows``: the Python
    Data Source API with no I/O. Each of 4 partitions yields the file's first row group as one
    batch, repeated (the last one sliced) until the partitions together yield ``rows`` rows."""

    @classmethod
    def name(cls) -> str:
        return "icefloe-bench-floor"

    def schema(self) -> str:
        return "id long, user_id int, amount double, kind string, ts timestamp_ntz"

    def reader(self, schema: Any) -> DataSourceReader:
        return FloorReader(self.options["file"], int(self.options["rows"]))


class FloorReader(DataSourceReader):  # type: ignore[misc]
    PARTITIONS = 4

    def __init__(self, file: str, rows: int) -> None:
        self.file, self.rows = file, rows

    def partitions(self) -> list[InputPartition]:
        share = self.rows // self.PARTITIONS
        return [InputPartition(share + (self.rows % self.PARTITIONS if k == 0 else 0)) for k in range(self.PARTITIONS)]

    def read(self, partition: InputPartition) -> Any:
        import pyarrow.parquet as pq

        batch = pq.ParquetFile(self.file).read_row_group(0).combine_chunks().to_batches(max_chunksize=122_880)[0]
        batch = batch.replace_schema_metadata(None)
        left = int(partition.value)
        while left > 0:
            yield batch if left >= batch.num_rows else batch.slice(0, left)
            left -= batch.num_rows


def batch_read(spark: Any, location: str, files: list[str], rounds: int) -> dict[str, float]:
    def icefloe() -> None:
        df = spark.read.format("icefloe").option("uri", location).option("table", "bench.events").load()
        df.selectExpr("count(*)", "sum(amount)").collect()

    def icefloe_columns() -> None:
        # The Python Data Source API has no column pruning (the reader gets the full schema);
        # the columns option is how a user prunes, as spark.read.parquet does by itself.
        df = (spark.read.format("icefloe").option("uri", location).option("table", "bench.events")
              .option("columns", "amount").load())
        df.selectExpr("count(*)", "sum(amount)").collect()

    def parquet() -> None:
        spark.read.parquet(*files).selectExpr("count(*)", "sum(amount)").collect()

    rows = spark.read.parquet(*files).count()

    def floor() -> None:
        df = spark.read.format("icefloe-bench-floor").option("file", files[0]).option("rows", str(rows)).load()
        counted = df.selectExpr("count(*)", "sum(amount)").collect()[0][0]
        assert counted == rows, (counted, rows)

    times: dict[str, list[float]] = {"icefloe": [], "icefloe_columns": [], "parquet": [], "floor": []}
    icefloe(), parquet(), floor()  # warm-up: JVM, Python workers
    for k in range(rounds):
        order = [("icefloe", icefloe), ("icefloe_columns", icefloe_columns), ("parquet", parquet), ("floor", floor)]
        for name, action in order if k % 2 == 0 else reversed(order):
            times[name].append(timed(action))
    return {name: statistics.median(v) for name, v in times.items()}


def stream_latency(spark: Any, location: str, table: str, commits: int, polling: bool) -> list[float]:
    """ack -> visible (ms) for each commit, one commit at a time."""
    visible: dict[int, float] = {}
    arrived = threading.Condition()

    def sink(frame: Any, batch_id: int) -> None:
        now = time.perf_counter()
        with arrived:
            for row in frame.select("x").collect():
                visible[int(row.x)] = now
            arrived.notify_all()

    reader = spark.readStream.format("icefloe").option("uri", location).option("table", table)
    if polling:
        reader = reader.option("latestOffsetWaitMs", "0")
    checkpoint = tempfile.mkdtemp(prefix="icefloe-bench-cp-")
    query = (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 second" if polling else "0 seconds").start())
    latencies: list[float] = []
    gaps = random.Random(16)
    try:
        while query.lastProgress is None:
            time.sleep(0.1)
        for k in range(commits):
            do_put(location, table, pa.table({"x": pa.array([k], pa.int64())}))
            acked = time.perf_counter()
            with arrived:
                if not arrived.wait_for(lambda k=k: k in visible, 60):
                    raise RuntimeError(f"commit {k} not visible in 60 s: {query.status}")
            latencies.append((visible[k] - acked) * 1000)
            time.sleep(gaps.uniform(0.05, 1.0))  # no phase lock with the 1 s trigger
    finally:
        query.stop()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def write(spark: Any, location: str, rows: int, run: int) -> dict[str, float]:
    df = spark.range(0, rows, numPartitions=4).selectExpr("id AS x", "concat('v', id) AS s")
    df.cache().count()
    data = pa.table({"x": pa.array(range(rows), pa.int64()), "s": [f"v{i}" for i in range(rows)]})
    # A 100-row write first, so the timed one does not pay for Spark's first Python write
    # workers (4-5 s on a fresh session; about 1 s for any later write).
    (spark.range(0, 100, numPartitions=4).selectExpr("id AS x", "concat('v', id) AS s").write.format("icefloe")
     .option("uri", location).option("table", f"bench.warm_{run}").mode("append").save())
    spark_s = timed(lambda: df.write.format("icefloe").option("uri", location).option("table", f"bench.w_{run}")
                    .mode("append").save())
    doput_s = timed(lambda: do_put(location, f"bench.p_{run}", data))
    df.unpersist()
    return {"spark_write_s": spark_s, "doput_s": doput_s}


def one_run(spark: Any, location: str, files: list[str], args: argparse.Namespace, run: int) -> dict[str, Any]:
    batch = batch_read(spark, location, files, args.rounds)
    pushed = stream_latency(spark, location, f"bench.s1_{run}", args.commits, polling=False)
    polled = stream_latency(spark, location, f"bench.s2_{run}", args.commits, polling=True)
    writes = write(spark, location, args.write_rows or args.rows, run)
    return {
        "load_average": os.getloadavg()[0],
        "batch_s": batch,
        "batch_ratio": batch["parquet"] / batch["icefloe"],
        "batch_columns_ratio": batch["parquet"] / batch["icefloe_columns"],
        "floor_ratio": batch["parquet"] / batch["floor"],
        "batch_vs_floor": batch["floor"] / batch["icefloe"],
        "stream_ms": {"feed_p50": statistics.median(pushed), "feed_p99": percentile(pushed, 0.99),
                      "poll1s_p50": statistics.median(polled), "poll1s_p99": percentile(polled, 0.99)},
        "stream_p50_ratio": statistics.median(pushed) / statistics.median(polled),
        "write": writes,
        "write_ratio": writes["doput_s"] / writes["spark_write_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--write-rows", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="icefloe-bench-spark-"))
    warehouse = work / "warehouse"
    files = make_table(warehouse, args.rows, args.files)
    make_tables_in(warehouse, args.runs)
    server = ServerProcess(warehouse).start()
    spark = make_session()
    spark.dataSource.register(FloorSource)
    runs = []
    try:
        for run in range(args.runs):
            runs.append(one_run(spark, server.location, files, args, run))
            print(f"run {run + 1}: {json.dumps(runs[-1])}", flush=True)
    finally:
        spark.stop()
        server.stop()

    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)

    result = {
        "rows": args.rows, "commits": args.commits, "runs": runs,
        "median": {key: median(key) for key in ("batch_ratio", "batch_columns_ratio", "floor_ratio",
                                                 "batch_vs_floor", "stream_p50_ratio",
                                                 "write_ratio", "load_average")},
        "batch_target": ">= 0.7", "stream_target": "<= 0.3",
    }
    print(f"{args.rows:,} rows, {args.rounds} rounds, {args.commits} commits per stream, {args.runs} runs")
    print(f"{'run':>4} {'load':>5} {'batch s':>8} {'parquet s':>9} {'ratio':>6} {'cols ratio':>10} "
          f"{'floor s':>8} {'floor ratio':>11} {'vs floor':>8} "
          f"{'feed p50':>9} {'poll p50':>9} {'ratio':>6} {'feed p99':>9} {'write s':>8} {'DoPut s':>8} {'ratio':>6}")
    for n, r in enumerate(runs, 1):
        b, s, w = r["batch_s"], r["stream_ms"], r["write"]
        print(f"{n:>4} {r['load_average']:5.1f} {b['icefloe']:8.2f} {b['parquet']:9.2f} {r['batch_ratio']:6.2f} "
              f"{r['batch_columns_ratio']:10.2f} {b['floor']:8.2f} {r['floor_ratio']:11.2f} {r['batch_vs_floor']:8.2f} "
              f"{s['feed_p50']:7.0f}ms {s['poll1s_p50']:7.0f}ms "
              f"{r['stream_p50_ratio']:6.2f} {s['feed_p99']:7.0f}ms {w['spark_write_s']:8.2f} {w['doput_s']:8.2f} "
              f"{r['write_ratio']:6.3f}")
    m = result["median"]
    print(f"median: batch {m['batch_ratio']:.2f}x parquet (target >= 0.7), with columns=amount "
          f"{m['batch_columns_ratio']:.2f}x; the API floor (no I/O) {m['floor_ratio']:.2f}x parquet, icefloe "
          f"{m['batch_vs_floor']:.2f}x the floor; "
          f"stream p50 {m['stream_p50_ratio']:.2f}x the 1 s poll (target <= 0.3); "
          f"write {m['write_ratio']:.3f}x DoPut (report); load {m['load_average']:.1f}")
    save_run("spark", result)
    server.kill()


def make_tables_in(warehouse: Path, runs: int) -> None:
    for run in range(runs):
        make_tables_ns(warehouse, (f"bench.s1_{run}", f"bench.s2_{run}"), pa.schema([pa.field("x", pa.int64())]))
        make_tables_ns(warehouse, (f"bench.w_{run}", f"bench.p_{run}", f"bench.warm_{run}"),
                       pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())]))


def make_tables_ns(warehouse: Path, names: tuple[str, ...], schema: pa.Schema) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("bench", warehouse=str(warehouse))
    try:
        for name in names:
            cat.create_table(name, schema)
    finally:
        cat.close()


if __name__ == "__main__":
    main()
