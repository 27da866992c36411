"""Sequential pyiceberg appends: RocksCatalog vs pyiceberg's SqlCatalog (SQLite), same run, same rows.

Each catalog gets a fresh warehouse, one table and ``--n`` appends of the same 100-row Arrow
table through ``Table.append``. Reported per catalog: appends/s, median per-commit time, and
growth = median of the last 100 commits / median of the first 100 (how commit cost grows with
history). The ratio is RocksCatalog's rate over SqlCatalog's.

    python benchmarks/bench_catalog_appends.py [--n 1000] [--rows 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_records import save_run  # noqa: E402

from catalog import RocksCatalog  # noqa: E402


def make_rows(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"row-{i}" for i in range(rows)], pa.string()),
            "value": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
        }
    )


def run(catalog: Catalog, rows: pa.Table, n: int) -> tuple[list[float], list[float]]:
    """Append ``n`` times; return per-commit wall times and CPU times (seconds)."""
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.appends", rows.schema)
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(n):
        start, start_cpu = time.perf_counter(), time.process_time()
        table.append(rows)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    count = catalog.load_table("bench.appends").scan().to_arrow().num_rows
    if count != n * rows.num_rows:
        raise AssertionError(f"{type(catalog).__name__}: expected {n * rows.num_rows} rows, scanned {count}")
    return wall, cpu


def summarize(wall: list[float], cpu: list[float]) -> dict[str, Any]:
    """Rates from wall time; growth from wall and from CPU time (less exposed to a busy machine)."""
    window = min(100, max(1, len(wall) // 2))
    first, last = statistics.median(wall[:window]), statistics.median(wall[-window:])
    first_cpu, last_cpu = statistics.median(cpu[:window]), statistics.median(cpu[-window:])
    return {
        "commits": len(wall),
        "total_s": round(sum(wall), 3),
        "appends_per_s": round(len(wall) / sum(wall), 2),
        "median_ms": round(statistics.median(wall) * 1000, 2),
        "window": window,
        "first_window_median_ms": round(first * 1000, 2),
        "last_window_median_ms": round(last * 1000, 2),
        "growth_last_over_first": round(last / first, 3),
        "cpu_first_window_median_ms": round(first_cpu * 1000, 2),
        "cpu_last_window_median_ms": round(last_cpu * 1000, 2),
        "cpu_growth_last_over_first": round(last_cpu / first_cpu, 3),
        "median_ms_per_100": [round(statistics.median(wall[i : i + 100]) * 1000, 2) for i in range(0, len(wall), 100)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="appends per catalog (default 1000)")
    parser.add_argument("--rows", type=int, default=100, help="rows per append (default 100)")
    args = parser.parse_args()
    rows = make_rows(args.rows)
    results: dict[str, Any] = {"n": args.n, "rows_per_append": args.rows}
    with tempfile.TemporaryDirectory(prefix="bench-rocks-") as tmp:
        rocks = RocksCatalog("bench", warehouse=str(Path(tmp) / "warehouse"))
        results["rocks"] = summarize(*run(rocks, rows, args.n))
        rocks.close()
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        sql = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")
        results["sql"] = summarize(*run(sql, rows, args.n))
        sql.close()
    results["rate_ratio_rocks_over_sql"] = round(results["rocks"]["appends_per_s"] / results["sql"]["appends_per_s"], 2)
    results["targets"] = {"rate_ratio_min": 10.0, "rocks_growth_max": 1.5}

    header = (
        f"{'catalog':<13}{'appends/s':>10}{'median ms':>10}{'first ms':>9}{'last ms':>9}{'growth':>8}"
        f"{'cpu first':>10}{'cpu last':>9}{'cpu growth':>11}"
    )
    print(f"{args.n} sequential {args.rows}-row appends per catalog (first/last = median of the first/last 100)")
    print(header)
    print("-" * len(header))
    for key, label in (("rocks", "RocksCatalog"), ("sql", "SqlCatalog")):
        r = results[key]
        print(
            f"{label:<13}{r['appends_per_s']:>10}{r['median_ms']:>10}{r['first_window_median_ms']:>9}"
            f"{r['last_window_median_ms']:>9}{r['growth_last_over_first']:>8}{r['cpu_first_window_median_ms']:>10}"
            f"{r['cpu_last_window_median_ms']:>9}{r['cpu_growth_last_over_first']:>11}"
        )
    print(f"rate ratio RocksCatalog / SqlCatalog: {results['rate_ratio_rocks_over_sql']}x")
    save_run("catalog_appends", results)


if __name__ == "__main__":
    main()
