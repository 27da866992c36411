"""A streaming write job run as its own process (its own Spark JVM), so a test can kill -9 it.

``python stream_job.py URI CHECKPOINT MARKER ROWS``: streams ``ns.src`` into ``ns.dst`` with
``format("icefloe")`` until ``ns.dst`` holds ROWS rows, then exits 0 (the test kills it first and
restarts the same query in its own session). In each micro-batch, the
first task stages its rows at once; the second, the first time it runs with MARKER absent,
creates MARKER and then sleeps, so the test can kill the job while one task's rows are staged
and the batch is not committed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_support import make_session, sql  # noqa: E402

URI, CHECKPOINT, MARKER, ROWS = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])


def _hold_second_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    held = context is not None and context.partitionId() == 1 and not MARKER.exists()
    for batch in batches:
        if held:
            MARKER.write_text(str(os.getpid()))
            time.sleep(600)  # killed here
        yield batch


def main() -> None:
    spark = make_session()
    source = (spark.readStream.format("icefloe").option("uri", URI).option("table", "ns.src")
              .option("startingOffsets", "earliest").load())
    query = (source.repartition(2, "x").mapInArrow(_hold_second_task, "x long, s string")
             .writeStream.format("icefloe").option("uri", URI).option("table", "ns.dst")
             .option("checkpointLocation", CHECKPOINT).trigger(processingTime="0 seconds").start())
    deadline = time.monotonic() + 240
    while len(sql(URI, "SELECT x FROM ns.dst")) < ROWS:
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out; status {query.status}")
        time.sleep(0.3)
    time.sleep(2.0)  # a second commit of the batch would land now
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
