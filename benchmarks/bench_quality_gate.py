"""What the quality gate costs an append: rows/s into a table with expectations / into the same
table without, in one process (``icefloe.open``: no network in the way), alternating.

Each round appends the same 200,000-row table (in 50,000-row batches) to a plain table and to
one declaring three expectations (a range, a set and ``unique(id)``, all ``warn`` so every
row lands on both sides); the ratio of the medians of the rounds' rows/s is the figure (reported:
the plain side is an in-memory table written straight to Parquet, the worst case for the gate).
Writes ``benchmarks/results/quality_gate-<UTC time>.json``.

    python benchmarks/bench_quality_gate.py [--rounds 5] [--rows 200000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import icefloe  # noqa: E402
from benchmarks.run_records import save_run  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("currency", pa.string())])
EXPECTATIONS = {
    "icefloe.expect.amount_range": "amount BETWEEN 0 AND 1000000",
    "icefloe.expect.amount_range.on-failure": "warn",
    "icefloe.expect.currency": "currency IN ('EUR', 'USD', 'GBP')",
    "icefloe.expect.currency.on-failure": "warn",
    "icefloe.expect.one_id": "unique(id)",
    "icefloe.expect.one_id.on-failure": "warn",
}


def rows(n: int, start: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "amount": pa.array([float(i % 5000) for i in range(n)]),
                     "currency": pa.array([("EUR", "USD", "GBP")[i % 3] for i in range(n)])}, SCHEMA)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"plain": [], "gated": []}
    with tempfile.TemporaryDirectory() as folder, icefloe.open(Path(folder) / "wh") as lake:
        lake.create_namespace("bench")
        for name in rates:
            lake.create_table(f"bench.{name}", schema=SCHEMA)
        catalog = lake.backend.catalog  # type: ignore[attr-defined]
        with catalog.load_table("bench.gated").transaction() as tx:
            tx.set_properties(EXPECTATIONS)
        data = rows(args.rows, 0)
        batches = data.to_batches(max_chunksize=50_000)
        for n in range(args.rounds + 1):
            for name in (("plain", "gated") if n % 2 else ("gated", "plain")):
                table = lake.table(f"bench.{name}")
                started = time.perf_counter()
                table.append(pa.Table.from_batches(batches))
                seconds = time.perf_counter() - started
                if n:  # round 0 warms both up
                    rates[name].append(args.rows / seconds)
    plain, gated = statistics.median(rates["plain"]), statistics.median(rates["gated"])
    raw = {"rows_per_append": args.rows, "rounds": args.rounds, "plain_rows_per_s": round(plain),
           "gated_rows_per_s": round(gated), "ratio": round(gated / plain, 3),
           "expectations": sorted(k for k in EXPECTATIONS if not k.endswith("on-failure"))}
    print(f"plain {plain:,.0f} rows/s, gated {gated:,.0f} rows/s: ratio {gated / plain:.3f}")
    save_run("quality_gate", raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
