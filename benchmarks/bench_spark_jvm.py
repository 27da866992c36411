"""The JVM Spark connector (format "icefloe-flight") against baselines in the same run, on one
local[2] Spark session with the connector's jar and the Python data source both registered.

- Read: count + sum(amount) over the table, four ways, alternating order each round:
  ``spark.read.parquet`` of the same data files (the baseline), the JVM connector scanning
  (``pushDownAggregate=false``: every row crosses Flight as Arrow columns into Spark), the JVM
  connector as a user runs it (the aggregate is pushed: the server answers it), and the Python
  data source (``format("icefloe")``, its ``columns`` option pruning to ``amount``).
  ``scan_ratio`` = parquet time / JVM scan time (target >= 0.8).
- Write: ``df.write.format("icefloe-flight")`` of ``--write-rows`` rows (staged per task, one
  commit) vs one client's DoPut of the same rows; ``write_ratio`` = DoPut time / Spark time.
  The write runs with the connector's flat converter (the default), with Spark's ArrowWriter
  (``writeConverter=spark``) and with the flat converter in the old fixed 16384-row batches
  (``write_ratio_16k``: the baseline of the byte-capped batch size), interleaved with the DoPut,
  after one untimed write (the first write of a run paid the JVM's and the table's cold start:
  two identical settings once measured 0.67x and 0.77x);
  each also reports the CPU seconds it cost Spark's JVM and the server (``cpu_*``), steadier
  than wall time under load.
- Stream latency: DoPut start -> the row in a running stream's ``foreachBatch`` (median of
  ``--latency-commits``), triggered by the commit feed vs a 1 s processing-time trigger (what a
  polling source gives); ``latency_ratio`` = feed p50 / 1 s-trigger p50 (target <= 0.2).

``--runs`` runs (default 3); the table shows each run with the load average at its end, and the
median of the runs. Results go to a run file benchmarks/results/spark_jvm-<UTC time>.json.

Usage: python benchmarks/bench_spark_jvm.py [--rows 10000000] [--files 8] [--rounds 1] [--runs 3]
       [--no-reads] [--no-writes] [--no-stream]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "pyspark_icefloe"))

from bench_flightsql_scan import make_table  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402
from spark_support import do_put, make_session  # noqa: E402

READS = ("parquet", "jvm_scan", "jvm_pushed", "python")
CPU_KEYS = ("spark_jvm_cpu", "spark_server_cpu", "spark_arrowwriter_jvm_cpu", "spark_arrowwriter_server_cpu",
            "spark_16k_jvm_cpu", "spark_16k_server_cpu", "doput_jvm_cpu", "doput_server_cpu")


def connector_jar() -> str:
    out = subprocess.run([str(ROOT / "scripts" / "build-spark-connector")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1].split("JAR=", 1)[1]


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def read_times(spark: Any, location: str, files: list[str], rounds: int) -> dict[str, float]:
    expected = spark.read.parquet(*files).selectExpr("count(*)", "sum(amount)").collect()[0]

    def check(frame: Any) -> None:
        got = frame.selectExpr("count(*)", "sum(amount)").collect()[0]
        assert got[0] == expected[0] and abs(got[1] - expected[1]) < 1e-6 * abs(expected[1]), (got, expected)

    def jvm(pushed: bool) -> Any:
        return (spark.read.format("icefloe-flight").option("uri", location).option("table", "bench.events")
                .option("pushDownAggregate", str(pushed).lower()).load())

    actions = {
        "parquet": lambda: check(spark.read.parquet(*files)),
        "jvm_scan": lambda: check(jvm(False)),
        "jvm_pushed": lambda: check(jvm(True)),
        "python": lambda: check(spark.read.format("icefloe").option("uri", location).option("table", "bench.events")
                                .option("columns", "amount").load()),
    }
    for action in actions.values():  # warm-up: JVM classes, Python workers, server caches
        action()
    times: dict[str, list[float]] = {name: [] for name in READS}
    for k in range(rounds):
        order = list(actions.items())
        for name, action in order if k % 2 == 0 else reversed(order):
            times[name].append(timed(action))
    return {name: statistics.median(v) for name, v in times.items()}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc), all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_times(spark: Any, server: ServerProcess, source: pa.Table, run: int) -> dict[str, float]:
    """One DoPut of ``source`` and the same rows written by Spark, with the connector's flat
    converter (the default) and with Spark's ArrowWriter (``writeConverter=spark``, the A/B):
    wall seconds, and the CPU seconds each took in Spark's JVM (driver and executors: local mode)
    and in the server, which under load are steadier than wall time."""
    location = server.location
    path = Path(tempfile.mkdtemp(prefix="icefloe-bench-jvm-write-")) / "rows.parquet"
    pq.write_table(source, path)
    frame = spark.read.parquet(str(path)).repartition(2).cache()
    frame.count()
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    assert server.proc is not None
    server_pid = server.proc.pid

    def spark_write(converter: str, batch_rows: int | None = None, table: str = f"bench.jw_{run}") -> None:
        writer = frame.write.format("icefloe-flight").option("uri", location).option("table", table)
        if batch_rows is not None:
            writer = writer.option("writeBatchRows", str(batch_rows))
        writer.option("writeConverter", converter).mode("append").save()

    def one_put() -> None:
        do_put(location, f"bench.jp_{run}", source)

    # Alternating within the run: A, B, C, D, then reversed, so a load change hits all of them.
    # spark_16k: the flat converter in the old fixed 16384-row batches (the default's baseline).
    actions = {"spark": lambda: spark_write("flat"), "spark_arrowwriter": lambda: spark_write("spark"),
               "spark_16k": lambda: spark_write("flat", 16384), "doput": one_put}
    spark_write("flat", table=f"bench.jwarm_{run}")  # untimed: the run's cold start
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in actions}
    for k in range(2):
        order = list(actions.items())
        for name, action in order if k % 2 == 0 else reversed(order):
            jvm0, server0 = cpu_seconds(jvm_pid), cpu_seconds(server_pid)
            wall = timed(action)
            times[name].append((wall, cpu_seconds(jvm_pid) - jvm0, cpu_seconds(server_pid) - server0))
    frame.unpersist()
    out: dict[str, float] = {}
    for name, samples in times.items():
        out[name] = statistics.median(t[0] for t in samples)
        out[name + "_jvm_cpu"] = statistics.median(t[1] for t in samples)
        out[name + "_server_cpu"] = statistics.median(t[2] for t in samples)
    return out


def stream_latency(spark: Any, location: str, table: str, interval: str, commits: int) -> float:
    """Median seconds from a DoPut's start to its row in a foreachBatch of a running stream."""
    seen: dict[int, float] = {}

    def sink(frame: Any, batch_id: int) -> None:
        now = time.perf_counter()
        for row in frame.select("x").collect():
            seen.setdefault(row.x, now)

    stream = (spark.readStream.format("icefloe-flight").option("uri", location).option("table", table)
              .option("startingOffsets", "latest").load())
    query = stream.writeStream.foreachBatch(sink).trigger(processingTime=interval).start()
    latencies = []
    try:
        wait_until(lambda: query.lastProgress is not None)
        for k in range(commits):
            time.sleep(0.1 + (k * 0.37) % 1.0)  # commits at varied phases of a polling interval
            start = time.perf_counter()
            do_put(location, table, pa.table({"x": pa.array([k], pa.int64())}))
            wait_until(lambda k=k: k in seen)
            latencies.append(seen[k] - start)
    finally:
        query.stop()
    return statistics.median(latencies)


def wait_until(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the stream did not deliver in time")
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--write-rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-commits", type=int, default=8)
    parser.add_argument("--no-reads", action="store_true", help="only the write and the stream latency")
    parser.add_argument("--no-writes", action="store_true", help="skip the write")
    parser.add_argument("--no-stream", action="store_true", help="skip the stream latency")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="icefloe-bench-spark-jvm-"))
    warehouse = work / "warehouse"
    files = make_table(warehouse, args.rows, args.files)
    # The write's rows: the table's own, from its files (10M by default, as the target).
    source = pa.concat_tables([pq.read_table(f) for f in files]).slice(0, args.write_rows)
    make_write_tables(warehouse, args.runs, source.schema)
    server = ServerProcess(warehouse).start()
    spark = make_session(conf={"spark.jars": connector_jar()})
    runs: list[dict[str, Any]] = []
    try:
        for run in range(args.runs):
            reads = (dict.fromkeys(READS, float("nan")) if args.no_reads
                     else read_times(spark, server.location, files, args.rounds))
            writes = (dict.fromkeys(("spark", "spark_arrowwriter", "spark_16k", "doput"), float("nan"))
                      if args.no_writes else write_times(spark, server, source, run))
            feed_p50 = poll_p50 = float("nan")
            if not args.no_stream:
                feed_p50 = stream_latency(spark, server.location, f"bench.lf_{run}", "0 seconds",
                                          args.latency_commits)
                poll_p50 = stream_latency(spark, server.location, f"bench.lp_{run}", "1 second",
                                          args.latency_commits)
            runs.append({
                "reads": reads, "writes": writes,
                "scan_ratio": reads["parquet"] / reads["jvm_scan"],
                "pushed_ratio": reads["parquet"] / reads["jvm_pushed"],
                "python_ratio": reads["parquet"] / reads["python"],
                "jvm_vs_python": reads["python"] / reads["jvm_scan"],
                "write_ratio": writes["doput"] / writes["spark"],
                "write_ratio_arrowwriter": writes["doput"] / writes["spark_arrowwriter"],
                "write_ratio_16k": writes["doput"] / writes["spark_16k"],
                **{f"cpu_{key}": writes.get(key, float("nan")) for key in CPU_KEYS},
                "feed_p50_s": feed_p50, "poll_p50_s": poll_p50, "latency_ratio": feed_p50 / poll_p50,
                "load_average": os.getloadavg()[0],
            })
            print(f"run {run + 1}: {json.dumps(runs[-1])}", flush=True)
    finally:
        spark.stop()
        server.stop()
    keys = ("scan_ratio", "pushed_ratio", "python_ratio", "jvm_vs_python", "write_ratio", "write_ratio_arrowwriter",
            "write_ratio_16k",
            "feed_p50_s", "poll_p50_s",
            "latency_ratio", "load_average", *(f"cpu_{key}" for key in CPU_KEYS))
    # Only what was measured: a --no-reads run holds no read figures (not NaN ones).
    median = {key: statistics.median(float(r[key]) for r in runs) for key in keys
              if not any(math.isnan(float(r[key])) for r in runs)}
    save_run("spark_jvm", {"rows": args.rows, "write_rows": source.num_rows, "runs": runs, "median": median,
                           "scan_target": ">= 0.8", "write_target": ">= 0.7", "latency_target": "<= 0.2"})
    print(f"{args.rows:,} rows in {args.files} files; write {source.num_rows:,} rows; {args.runs} runs")
    print(f"{'run':>4} {'load':>5} {'parquet s':>9} {'jvm scan s':>10} {'jvm pushed s':>12} {'python s':>8} "
          f"{'scan x':>6} {'py x':>5} {'write x':>7}")
    for n, r in enumerate(runs, 1):
        t = r["reads"]
        print(f"{n:>4} {r['load_average']:5.1f} {t['parquet']:9.2f} {t['jvm_scan']:10.2f} {t['jvm_pushed']:12.2f} "
              f"{t['python']:8.2f} {r['scan_ratio']:6.2f} {r['python_ratio']:5.2f} {r['write_ratio']:7.2f}")
    m = {key: median.get(key, float("nan")) for key in keys}
    print(f"median: JVM scan {m['scan_ratio']:.2f}x parquet (target >= 0.8), pushed aggregate "
          f"{m['pushed_ratio']:.2f}x, Python source {m['python_ratio']:.2f}x parquet "
          f"(JVM {m['jvm_vs_python']:.2f}x faster than Python); write {m['write_ratio']:.2f}x one DoPut "
          f"(target >= 0.7; {m['write_ratio_arrowwriter']:.2f}x with Spark's ArrowWriter, "
          f"{m['write_ratio_16k']:.2f}x with the old fixed 16384-row batches); "
          f"commit -> foreachBatch row p50 {m['feed_p50_s'] * 1000:.0f} ms on the feed vs "
          f"{m['poll_p50_s'] * 1000:.0f} ms with a 1 s trigger = {m['latency_ratio']:.2f}x (target <= 0.2); "
          f"load {m['load_average']:.1f}")
    print("CPU seconds of a write (median), Spark's JVM / the server: flat converter "
          f"{m['cpu_spark_jvm_cpu']:.2f} / {m['cpu_spark_server_cpu']:.2f}, Spark's ArrowWriter "
          f"{m['cpu_spark_arrowwriter_jvm_cpu']:.2f} / {m['cpu_spark_arrowwriter_server_cpu']:.2f}, 16384-row batches "
          f"{m['cpu_spark_16k_jvm_cpu']:.2f} / {m['cpu_spark_16k_server_cpu']:.2f}, "
          f"one DoPut - / {m['cpu_doput_server_cpu']:.2f}")


def make_write_tables(warehouse: Path, runs: int, schema: pa.Schema) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("bench", warehouse=str(warehouse))
    try:
        for run in range(runs):
            cat.create_table(f"bench.jw_{run}", schema)
            cat.create_table(f"bench.jp_{run}", schema)
            for stream in ("lf", "lp"):
                cat.create_table(f"bench.{stream}_{run}", pa.schema([pa.field("x", pa.int64())]))
    finally:
        cat.close()


if __name__ == "__main__":
    main()
