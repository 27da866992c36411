"""Admission control of the icefloe stream: maxCommitsPerTrigger, maxRowsPerTrigger and
maxBytesPerTrigger (pyspark
4.1 through latestOffset(), 4.2+ through latestOffset(start, limit) and getDefaultReadLimit),
Trigger.AvailableNow and reportLatestOffset (4.2+). Runs in both environments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from servers import ServerProcess, serving
from spark_support import sql
from test_stream_read import Sink, _make, append, start, wait_for

pytestmark = pytest.mark.spark_latest
NEW_API = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("spark-admission") / "warehouse"
    _make(warehouse, ("ns.c", "ns.r", "ns.b", "ns.b0", "ns.n", "ns.a"))
    with serving(warehouse) as proc:
        yield proc


def _commits(server: ServerProcess, table: str, count: int, rows: int, first: int = 0) -> int:
    seqs = [append(server, table, [k * 10 + j for j in range(rows)]) for k in range(first, first + count)]
    return seqs[0] - 1


def _commit_bytes(server: ServerProcess) -> int:
    """The data file bytes one 2-row commit adds (its snapshot summary's added-files-size)."""
    _commits(server, "ns.b0", 1, 2)
    summary = sql(server.location, 'SELECT summary FROM ns."b0$snapshots"').column("summary")[0].as_py()
    return int(dict(summary)["added-files-size"])


@pytest.mark.parametrize("option", [{"maxCommitsPerTrigger": "2"}, {"maxRowsPerTrigger": "5"},
                                    {"maxBytesPerTrigger": "2.5 commits"}])
def test_caps_hold_for_commits_that_pile_up(spark: Any, server: ServerProcess, tmp_path: Path,
                                            option: dict[str, str]) -> None:
    """Commits made while the first batch runs are admitted two at a time (two commits = 4 rows <= 5,
    two commits' files < 2.5 commits' bytes), on 4.1 through latestOffset() as on 4.2+."""
    tables = {"maxCommitsPerTrigger": "ns.c", "maxRowsPerTrigger": "ns.r", "maxBytesPerTrigger": "ns.b"}
    table = tables[next(iter(option))]
    if "maxBytesPerTrigger" in option:
        option = {"maxBytesPerTrigger": str(int(2.5 * _commit_bytes(server)))}
    sink = Sink(first_batch_s=4.0)
    query = start(spark, server, table, sink, tmp_path / "cp", startingOffsets="latest", **option)
    try:
        wait_for(query, lambda: query.lastProgress is not None)  # the stream is waiting for commits
        _commits(server, table, 1, 2)
        wait_for(query, lambda: sink.busy)  # (4.2+ may run an empty batch first)
        _commits(server, table, 4, 2, first=1)
        wait_for(query, lambda: len(sink.rows()) == 10)
    finally:
        query.stop()
    sizes = [len(rows) for _, rows in sorted(sink.batches.items()) if rows]
    assert sizes == [2, 4, 4], sizes


@pytest.mark.skipif(not NEW_API, reason="latestOffset(start, limit) needs pyspark 4.2+")
def test_caps_hold_from_the_first_batch_on_4_2(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    """With the start offset given (4.2+), even commits made before the query started are capped."""
    before = _commits(server, "ns.n", 5, 2, first=100)
    sink = Sink()
    query = start(spark, server, "ns.n", sink, tmp_path / "cp", startingOffsets=str(before), maxCommitsPerTrigger="2")
    try:
        wait_for(query, lambda: len(sink.rows()) == 10)
    finally:
        query.stop()
    assert [len(rows) for _, rows in sorted(sink.batches.items()) if rows] == [4, 4, 2]


@pytest.mark.skipif(not NEW_API, reason="Trigger.AvailableNow and reportLatestOffset need pyspark 4.2+")
def test_available_now_stops_at_the_head_and_reports_lag(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    before = _commits(server, "ns.a", 3, 1)
    sink = Sink()
    query = (spark.readStream.format("icefloe").option("uri", server.location).option("table", "ns.a")
             .option("startingOffsets", str(before)).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(90), "AvailableNow ends by itself"
    assert sink.rows() == [0, 10, 20]
    progress = query.lastProgress["sources"][0]
    assert progress["latestOffset"] is not None and '"seq"' in str(progress["latestOffset"])
