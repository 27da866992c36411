"""The Spark data source against baselines in the same run, on one local[2] Spark session.

- Batch: ``spark.read.format("icefloe")`` count + sum over the table vs ``spark.read.parquet``
  of the same data files (target >= 0.7x), alternating rounds, median time.
- Streaming: commit ack -> row visible in a ``foreachBatch`` sink, p50 / p99 over N commits,
  icefloe's feed-driven source (bounded wait in latestOffset, trigger 0 s) vs the same source
  polled every second (``latestOffsetWaitMs=0``, trigger 1 s: what Iceberg's Spark source does);
  target p50 <= 0.3x.
- Write: ``df.write.format("icefloe")`` of the rows vs one client's DoPut of the same rows.

Usage: python benchmarks/bench_spark.py [--rows 10000000] [--files 8] [--rounds 3] [--commits 50]
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
from servers import ServerProcess  # noqa: E402
from spark_support import do_put, make_session  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "spark.json"


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def batch_read(spark: Any, location: str, files: list[str], rounds: int) -> dict[str, float]:
    def icefloe() -> None:
        df = spark.read.format("icefloe").option("uri", location).option("table", "bench.events").load()
        df.selectExpr("count(*)", "sum(amount)").collect()

    def parquet() -> None:
        spark.read.parquet(*files).selectExpr("count(*)", "sum(amount)").collect()

    times: dict[str, list[float]] = {"icefloe": [], "parquet": []}
    icefloe(), parquet()  # warm-up: JVM, Python workers
    for k in range(rounds):
        order = [("icefloe", icefloe), ("parquet", parquet)]
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


def write(spark: Any, location: str, rows: int) -> dict[str, float]:
    df = spark.range(0, rows, numPartitions=4).selectExpr("id AS x", "concat('v', id) AS s")
    df.cache().count()
    data = pa.table({"x": pa.array(range(rows), pa.int64()), "s": [f"v{i}" for i in range(rows)]})
    spark_s = timed(lambda: df.write.format("icefloe").option("uri", location).option("table", "bench.w")
                    .mode("append").save())
    doput_s = timed(lambda: do_put(location, "bench.p", data))
    return {"spark_write_s": spark_s, "doput_s": doput_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--write-rows", type=int, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="icefloe-bench-spark-"))
    warehouse = work / "warehouse"
    files = make_table(warehouse, args.rows, args.files)
    make_tables_in(warehouse)
    server = ServerProcess(warehouse).start()
    spark = make_session()
    try:
        batch = batch_read(spark, server.location, files, args.rounds)
        pushed = stream_latency(spark, server.location, "bench.s1", args.commits, polling=False)
        polled = stream_latency(spark, server.location, "bench.s2", args.commits, polling=True)
        writes = write(spark, server.location, args.write_rows or args.rows)
    finally:
        spark.stop()
        server.stop()
    result = {
        "rows": args.rows,
        "load_average": os.getloadavg()[0],
        "batch_s": batch,
        "batch_ratio": batch["parquet"] / batch["icefloe"],
        "batch_target": ">= 0.7",
        "stream_ms": {"feed_p50": statistics.median(pushed), "feed_p99": percentile(pushed, 0.99),
                      "poll1s_p50": statistics.median(polled), "poll1s_p99": percentile(polled, 0.99)},
        "stream_p50_ratio": statistics.median(pushed) / statistics.median(polled),
        "stream_target": "<= 0.3",
        "write": writes,
        "write_ratio": writes["doput_s"] / writes["spark_write_s"],
    }
    s = result["stream_ms"]
    print(f"load average {result['load_average']:.1f}; {args.rows:,} rows, {args.rounds} rounds, "
          f"{args.commits} commits per stream")
    print(f"{'':12} {'icefloe':>10} {'baseline':>10} {'ratio':>8} {'target':>8}")
    print(f"{'batch s':12} {batch['icefloe']:10.2f} {batch['parquet']:10.2f} {result['batch_ratio']:8.2f} "
          f"{'>= 0.7':>8}   (count+sum; baseline spark.read.parquet of the same files)")
    print(f"{'stream p50':12} {s['feed_p50']:8.0f}ms {s['poll1s_p50']:8.0f}ms {result['stream_p50_ratio']:8.2f} "
          f"{'<= 0.3':>8}   (ack -> foreachBatch; baseline polled every 1 s)")
    print(f"{'stream p99':12} {s['feed_p99']:8.0f}ms {s['poll1s_p99']:8.0f}ms")
    print(f"{'write s':12} {writes['spark_write_s']:10.2f} {writes['doput_s']:10.2f} {result['write_ratio']:8.2f} "
          f"{'report':>8}   (df.write vs one client's DoPut of the same rows)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    server.kill()


def make_tables_in(warehouse: Path) -> None:
    make_tables_ns(warehouse, ("bench.s1", "bench.s2"), pa.schema([pa.field("x", pa.int64())]))
    make_tables_ns(warehouse, ("bench.w", "bench.p"), pa.schema([pa.field("x", pa.int64()),
                                                                 pa.field("s", pa.string())]))


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
