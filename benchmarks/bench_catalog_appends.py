"""Sequential pyiceberg appends: RocksCatalog vs pyiceberg's SqlCatalog (SQLite), same run, same rows.

Each catalog gets a fresh warehouse, one table and ``--n`` appends of the same 100-row Arrow
table through ``Table.append``. Reported per catalog: appends/s, median per-commit time, and
growth = median of the last 100 commits / median of the first 100 (how commit cost grows with
history). The ratio is RocksCatalog's rate over SqlCatalog's.

    python benchmarks/bench_catalog_appends.py [--n 1000] [--rows 100]
"""

from __future__ import annotations

import argparse
import json
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

from catalog import RocksCatalog  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "catalog_appends.json"


def make_rows(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"row-{i}" for i in range(rows)], pa.string()),
            "value": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
        }
    )


def run(catalog: Catalog, rows: pa.Table, n: int) -> list[float]:
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.appends", rows.schema)
    times: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        table.append(rows)
        times.append(time.perf_counter() - start)
    count = catalog.load_table("bench.appends").scan().to_arrow().num_rows
    if count != n * rows.num_rows:
        raise AssertionError(f"{type(catalog).__name__}: expected {n * rows.num_rows} rows, scanned {count}")
    return times


def summarize(times: list[float]) -> dict[str, Any]:
    window = min(100, max(1, len(times) // 2))
    first = statistics.median(times[:window])
    last = statistics.median(times[-window:])
    return {
        "commits": len(times),
        "total_s": round(sum(times), 3),
        "appends_per_s": round(len(times) / sum(times), 2),
        "median_ms": round(statistics.median(times) * 1000, 2),
        "first_window_median_ms": round(first * 1000, 2),
        "last_window_median_ms": round(last * 1000, 2),
        "window": window,
        "growth_last_over_first": round(last / first, 3),
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
        results["rocks"] = summarize(run(rocks, rows, args.n))
        rocks.close()
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        sql = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")
        results["sql"] = summarize(run(sql, rows, args.n))
        sql.close()
    results["rate_ratio_rocks_over_sql"] = round(results["rocks"]["appends_per_s"] / results["sql"]["appends_per_s"], 2)
    results["targets"] = {"rate_ratio_min": 10.0, "rocks_growth_max": 1.5}

    header = f"{'catalog':<12}{'appends/s':>11}{'median ms':>11}{'first ms':>10}{'last ms':>10}{'growth':>8}"
    print(f"{args.n} sequential {args.rows}-row appends per catalog")
    print(header)
    print("-" * len(header))
    for key, label in (("rocks", "RocksCatalog"), ("sql", "SqlCatalog")):
        r = results[key]
        print(
            f"{label:<12}{r['appends_per_s']:>11}{r['median_ms']:>11}{r['first_window_median_ms']:>10}"
            f"{r['last_window_median_ms']:>10}{r['growth_last_over_first']:>8}"
        )
    print(f"rate ratio RocksCatalog / SqlCatalog: {results['rate_ratio_rocks_over_sql']}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
