"""A Spark driver of its own (for kill -9 tests): streams table SRC into table DST through the
JVM connector (readStream and writeStream "icefloe-flight") with CHECKPOINT, until killed.

Usage: python spark_jvm_stream_child.py URI SRC DST CHECKPOINT"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The project root too: without it ``pyspark_icefloe`` resolves to the tests' folder of that
# name (a namespace package) when the child is started without PYTHONPATH, as CI starts it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from spark_jvm_support import FORMAT, jvm_session  # noqa: E402


def main() -> None:
    uri, source, target, checkpoint = sys.argv[1:5]
    spark = jvm_session()
    stream = (spark.readStream.format(FORMAT).option("uri", uri).option("table", source)
              .option("startingOffsets", "earliest").option("maxCommitsPerTrigger", "1").load())
    query = (stream.writeStream.format(FORMAT).option("uri", uri).option("table", target)
             .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
