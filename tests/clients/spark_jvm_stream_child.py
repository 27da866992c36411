"""A Spark driver of its own (for kill -9 tests): streams table SRC into table DST through the
JVM connector (readStream and writeStream "icefloe-flight") with CHECKPOINT, until killed.

With PAUSE_AT and MARKER, the task of the epoch holding the row x = PAUSE_AT stops mid-batch:
it has read its rows from the source's change scan, writes MARKER and waits (until killed),
while the epoch's other task stages its rows; the driver's commit of the epoch cannot come
before every task is done. A test waiting for MARKER kills the driver at that point, not at
whatever moment a timer picks.

Usage: python spark_jvm_stream_child.py URI SRC DST CHECKPOINT [PAUSE_AT MARKER]"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The project root too: without it ``pyspark_icefloe`` resolves to the tests' folder of that
# name (a namespace package) when the child is started without PYTHONPATH, as CI starts it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from spark_jvm_support import FORMAT, jvm_session  # noqa: E402


def pause_at(x: int, marker: Path) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A mapInArrow function passing batches on, except that the task whose batch holds row
    ``x`` writes ``marker`` and waits there for its kill."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            if x in batch.column("x").to_pylist():
                marker.write_text(f"task holding x = {x} is mid-batch\n")
                while True:
                    time.sleep(1)
            yield batch

    return run


def main() -> None:
    uri, source, target, checkpoint = sys.argv[1:5]
    spark = jvm_session()
    stream = (spark.readStream.format(FORMAT).option("uri", uri).option("table", source)
              .option("startingOffsets", "earliest").option("maxCommitsPerTrigger", "1").load())
    if len(sys.argv) > 5:
        # Two tasks an epoch: one pauses mid-batch, the other stages its rows meanwhile.
        stream = stream.repartition(2).mapInArrow(pause_at(int(sys.argv[5]), Path(sys.argv[6])), stream.schema)
    query = (stream.writeStream.format(FORMAT).option("uri", uri).option("table", target)
             .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
