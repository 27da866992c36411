"""polars and DuckDB consume an in-process ``Scan`` without copying it: polars keeps Arrow's own
buffers (the Arrow memory pool holds the data exactly as long as the DataFrame lives), and DuckDB
aggregates the stream batch by batch (Arrow's peak stays that of the stream's own read-ahead)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

import icefloe

ROWS = 4_000_000
DATA_BYTES = ROWS * 16  # two int64 columns


def _table(tmp_path: Path, rows: int = ROWS, files: int = 4) -> icefloe.Table:
    lake = icefloe.open(tmp_path / "warehouse")
    lake.create_namespace("ns")
    t = lake.create_table("ns.big", schema=pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    for part in range(files):
        ids = pa.array(range(part * rows // files, (part + 1) * rows // files), pa.int64())
        t.append(pa.table({"id": ids, "v": pc.multiply(ids, 2)}))
    return t


def test_polars_holds_arrows_buffers(tmp_path: Path) -> None:
    t = _table(tmp_path)
    gc.collect()
    before = pa.total_allocated_bytes()
    df = pl.DataFrame(t.scan())
    assert df.height == ROWS and df["v"].sum() == 2 * sum(range(ROWS))
    held = pa.total_allocated_bytes() - before
    assert held >= 0.9 * DATA_BYTES, f"polars copied the stream: Arrow holds only {held} bytes"
    del df
    gc.collect()
    assert pa.total_allocated_bytes() - before < 0.1 * DATA_BYTES  # released with the DataFrame


def _peak(fn: Callable[[], object]) -> int:
    """Arrow's peak allocation above the start while ``fn`` runs (sampled every millisecond)."""
    gc.collect()
    base = pa.total_allocated_bytes()
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], pa.total_allocated_bytes() - base)
            done.wait(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return peak[0]


def test_duckdb_streams_the_scan(tmp_path: Path) -> None:
    # 12M rows in 12 files: the stream's read-ahead peak moves by +-30 MB from run to run, so
    # the data must be large enough that a copy of it (192 MB) stands well clear of that noise
    # (with 64 MB the margin was crossed by noise alone: a CI run failed at 33.6 > 32 MB).
    rows = 3 * ROWS
    t = _table(tmp_path, rows, files=12)
    scan = t.scan()
    # The stream's own read-ahead, with a consumer that keeps nothing: the baseline.
    streaming = _peak(lambda: sum(batch.num_rows for batch in scan))
    result: list[object] = []

    def aggregate() -> None:
        stream = scan  # noqa: F841 - DuckDB finds the scan by its name among the caller's locals
        result.extend(duckdb.sql("SELECT count(*), sum(v) FROM stream").fetchall())

    in_duckdb = _peak(aggregate)
    assert result == [(rows, 2 * sum(range(rows)))]
    # A copy of the data would add all of it (16 bytes a row) on top of the read-ahead.
    assert in_duckdb < streaming + 0.5 * rows * 16, f"DuckDB copied the scan: {in_duckdb} vs {streaming} bytes"
