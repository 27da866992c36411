"""Where a commit's way to a streaming ``foreachBatch`` row goes (the JVM connector).

One server, one local[2] Spark session with the connector's jar and logger
``dev.icefloe.spark.trace`` at DEBUG; a stream on a one-column table, triggered at once
(``processingTime=0``); ``--commits`` single-row DoPuts at varied moments. For each commit the
steps are lined up by wall clock: the DoPut (start to answer), the feed event at the JVM, the
trigger seeing it, the batch's scan planned (and how many times), the sink entered, the executor
opening the change scan and its first rows, the row in the sink. Prints each commit's steps in
ms and their medians. Not a benchmark (no ratio): a trace to find what dominates.

Usage: python benchmarks/trace_spark_stream.py [--commits 8] [--jar PATH] [--conf key=value ...]
(it runs the stream in a child process, whose stderr carries the JVM's marks).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "pyspark_icefloe"))

from bench_spark_jvm import connector_jar  # noqa: E402
from servers import serving  # noqa: E402
from spark_support import do_put, make_session  # noqa: E402

MARK = re.compile(r"trace (\S+) (\S+) (\d+) at_ms=(\d+)")


def steps(commit: dict[str, float], marks: list[tuple[int, str]]) -> dict[str, float]:
    """One commit's steps (ms) from the Python-side times and the JVM's marks after its start."""

    def first(kind: str, after: float) -> float:
        found = [t for t, k in marks if k == kind and t >= after]
        return min(found) if found else float("nan")

    feed = first("feed-event", commit["start"])
    seen = first("offset-seen", feed)
    planned = first("plan-start", seen)
    plan_end = first("plan-end", planned)
    opened = first("reader-open", commit["sink"])
    rows = first("reader-first-batch", opened)
    return {
        "put": commit["ack"] - commit["start"], "feed": feed - commit["start"], "trigger_sees": seen - feed,
        "to_planning": planned - seen, "planning": plan_end - planned, "to_sink": commit["sink"] - plan_end,
        "sink_to_reader": opened - commit["sink"], "first_rows": rows - opened, "to_row": commit["row"] - rows,
        "total": commit["row"] - commit["start"],
        "plans": float(sum(1 for t, k in marks if k == "plan-start" and commit["start"] <= t <= commit["row"])),
    }


PY_MARK = re.compile(r"TRACE-PY start=([\d.]+) ack=([\d.]+) sink=([\d.]+) row=([\d.]+)")


def run_stream(commits: int, jar: str, conf: dict[str, str]) -> None:
    """The child: a server, a stream, ``commits`` DoPuts; prints one TRACE-PY line per commit
    (the JVM, started by this process, logs its marks to the same stderr)."""
    from catalog import RocksCatalog

    warehouse = Path(tempfile.mkdtemp(prefix="icefloe-trace-stream-")) / "warehouse"
    cat = RocksCatalog("trace", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.s", pa.schema([pa.field("x", pa.int64())]))
    cat.close()
    with serving(warehouse) as proc:
        spark = make_session(conf={"spark.jars": jar, **conf})
        jvm = spark._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "dev.icefloe.spark.trace", jvm.org.apache.logging.log4j.Level.DEBUG)
        seen: dict[int, tuple[float, float]] = {}

        def sink(frame: Any, batch_id: int) -> None:
            entered = time.time()
            for row in frame.select("x").collect():
                seen.setdefault(row.x, (entered, time.time()))

        query = (spark.readStream.format("icefloe-flight").option("uri", proc.location).option("table", "ns.s")
                 .option("startingOffsets", "latest").load().writeStream.foreachBatch(sink)
                 .trigger(processingTime="0 seconds").start())
        try:
            while query.lastProgress is None:
                time.sleep(0.01)
            for k in range(commits):
                time.sleep(0.1 + (k * 0.37) % 1.0)  # commits at varied moments
                start = time.time()
                do_put(proc.location, "ns.s", pa.table({"x": pa.array([k], pa.int64())}))
                ack = time.time()
                while k not in seen:
                    time.sleep(0.002)
                print(f"TRACE-PY start={start * 1000:.1f} ack={ack * 1000:.1f} sink={seen[k][0] * 1000:.1f} "
                      f"row={seen[k][1] * 1000:.1f}", file=sys.stderr, flush=True)
        finally:
            query.stop()
            spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--jar", help="the connector jar (default: scripts/build-spark-connector's)")
    parser.add_argument("--conf", nargs="*", default=[], help="extra Spark settings, key=value")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    jar = args.jar or connector_jar()
    if args.child:
        run_stream(args.commits, jar, dict(c.split("=", 1) for c in args.conf))
        return
    done = subprocess.run([sys.executable, __file__, "--child", "--commits", str(args.commits), "--jar", jar,
                           "--conf", *args.conf], capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).replace("\r", "\n")
    if done.returncode != 0:
        raise SystemExit(output[-4000:])
    marks = [(int(m.group(4)), m.group(1)) for m in MARK.finditer(output)]
    commits = [dict(zip(("start", "ack", "sink", "row"), map(float, m.groups()), strict=True))
               for m in PY_MARK.finditer(output)]
    rows = [steps(c, marks) for c in commits[1:]]  # the first is cold (JIT, Python workers)
    for r in rows:
        print({k: round(v) for k, v in r.items()})
    if rows:
        print("median ms", {k: statistics.median(r[k] for r in rows) for k in rows[0]})


if __name__ == "__main__":
    main()
