"""Scans of a table with row-level deletes vs the same rows compacted (issue 38).

Same server, same run, alternating order: ``SELECT * FROM t`` and an aggregate over Flight SQL
(ADBC) on three tables holding the same data files: one with position delete files removing
1% of the rows, one removing 10%, and the compacted table (plain files holding exactly the
rows that survive 1%). Median of ``--rounds`` runs each; the load average is printed since the
machine is shared. Target: the 1% scan within 1.3x of the compacted one.

Usage: python benchmarks/bench_deletes.py [--rows 2000000] [--files 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from row_deletes_support import data_files, position_delete  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

from catalog import RocksCatalog  # noqa: E402

QUERIES = {"scan": "SELECT * FROM b.{t}", "aggregate": "SELECT count(*), sum(v), max(name) FROM b.{t}"}


def _data(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "v": ids % 1000, "name": pa.array([f"name-{i % 5000}" for i in range(rows)])})


def build(warehouse: Path, rows: int, files: int) -> dict[str, int]:
    """Tables d1 (1% deleted), d10 (10% deleted) and c1 (d1's surviving rows, plain)."""
    catalog = RocksCatalog("bench", warehouse=str(warehouse))
    catalog.create_namespace("b")
    per = rows // files
    visible: dict[str, int] = {}
    for name, fraction in (("d1", 0.01), ("d10", 0.10)):
        table = catalog.create_table(f"b.{name}", _data(0, 1).schema)
        for k in range(files):
            table.append(_data(k * per, per))
        table = catalog.load_table(f"b.{name}")
        rng = np.random.default_rng(38)
        positions = {path: sorted(rng.choice(count, int(count * fraction), replace=False).tolist())
                     for path, count in data_files(table)}
        position_delete(table, positions)
        visible[name] = rows - sum(len(p) for p in positions.values())
        if name == "d1":
            compacted = catalog.create_table("b.c1", _data(0, 1).schema)
            for k, (_path, count) in enumerate(data_files(table)):
                keep = np.ones(count, dtype=bool)
                keep[list(positions[_path])] = False
                compacted.append(_data(k * per, per).filter(pa.array(keep)))
            visible["c1"] = visible["d1"]
    catalog.close()
    return visible


def _run(location: str, sql: str) -> tuple[float, int]:
    from adbc_driver_flightsql import dbapi

    with dbapi.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        cur.execute(sql)
        table = cur.fetch_arrow_table()
        return time.perf_counter() - started, table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp) / "wh"
        visible = build(warehouse, args.rows, args.files)
        server = ServerProcess(warehouse, []).start()
        times: dict[tuple[str, str], list[float]] = {}
        try:
            for name in ("c1", "d1", "d10"):  # warm-up: footers, manifests, delete sets cached
                for query in QUERIES.values():
                    _run(server.location, query.format(t=name))
            for _ in range(args.rounds):
                for name in ("c1", "d1", "d10"):
                    for kind, query in QUERIES.items():
                        seconds, count = _run(server.location, query.format(t=name))
                        if kind == "scan":
                            assert count == visible[name], (name, count, visible[name])
                        times.setdefault((name, kind), []).append(seconds)
        finally:
            server.stop()
    load = os.getloadavg()
    medians = {key: statistics.median(v) for key, v in times.items()}
    result: dict[str, Any] = {"rows": args.rows, "files": args.files, "rounds": args.rounds, "load_average": load,
                              "seconds": {f"{n}.{k}": s for (n, k), s in medians.items()}}
    print(f"load average {load[0]:.1f}; {args.rows:,} rows in {args.files} files; median of {args.rounds}")
    print(f"{'query':<10} {'compacted s':>12} {'1% del s':>10} {'ratio':>6} {'10% del s':>10} {'ratio':>6}")
    for kind in QUERIES:
        base = medians[("c1", kind)]
        one, ten = medians[("d1", kind)], medians[("d10", kind)]
        result[f"{kind}_ratio_1pct"] = one / base
        result[f"{kind}_ratio_10pct"] = ten / base
        print(f"{kind:<10} {base:>12.3f} {one:>10.3f} {one / base:>6.2f} {ten:>10.3f} {ten / base:>6.2f}")
    save_run("deletes", result)


if __name__ == "__main__":
    main()
