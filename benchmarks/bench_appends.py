"""Appends through a real icefloe server vs the disk's floor and pyiceberg, same run, same rows.

0. The floor: what any durable Iceberg append of ``--small-rows`` rows must at least do on this
   disk — write four small Parquet-sized files (data, manifest, manifest list, metadata),
   fsync each and their folder, then one fsync'd RocksDB batch (the catalog pointer). It is
   measured in rounds interleaved with the appends it is compared with, so disk contention
   from other processes hits both alike.

1. Bulk: one DoPut of ``--bulk-rows`` rows vs pyiceberg's ``Table.append`` of the same Arrow
   table (SqlCatalog/SQLite warehouse, in process). Ratio = icefloe rows/s / pyiceberg rows/s.
2. Small appends of ``--small-rows`` rows: pyiceberg SqlCatalog ``Table.append`` sequentially
   vs sequential DoPut and ``--writers`` concurrent DoPut writers (appends/s), plus the growth
   of DoPut's per-commit time over ``--commits`` commits (median of the last 100 / first 100).
3. Scan (pyiceberg ``load_table`` + ``scan().to_arrow()``) of the table built from those small
   appends, before and after ``icefloe.maintain``, vs a table holding the same rows written at
   once, in alternating rounds (9 each, medians).

The server runs with its defaults (background compaction on). Writes JSON to
a run file benchmarks/results/appends-<UTC time>.json.

    python benchmarks/bench_appends.py            # full run (10M rows, 1,000 commits)
    python benchmarks/bench_appends.py --quick    # a short development run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import rocksdict
from pyiceberg.catalog.sql import SqlCatalog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_records import save_run  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

from catalog import RocksCatalog  # noqa: E402
from catalog.durable_io import fsync_path  # noqa: E402


def make_rows(n: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table(
        {
            "id": ids,
            "ts": pa.array(range(1_700_000_000_000_000 + start, 1_700_000_000_000_000 + start + n), pa.int64()).cast(
                pa.timestamp("us")
            ),
            "value": pa.array([i * 0.5 for i in range(n)], pa.float64())
            if n <= 100_000
            else pa.compute.multiply(ids.cast(pa.float64()), 0.5),
            "name": pa.compute.binary_join_element_wise(
                "row-", pa.compute.cast(pa.compute.bit_wise_and(ids, 1023), pa.string()), ""
            ),
        }
    )


def do_put(client: flight.FlightClient, path: tuple[str, ...], data: pa.Table) -> dict[str, Any]:
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), data.schema)
    writer.write_table(data, max_chunksize=65_536)
    writer.done_writing()
    body = reader.read()
    writer.close()
    result: dict[str, Any] = json.loads(body.to_pybytes())
    return result


class Floor:
    """The physical floor of one small durable append: four files written and fsync'd (plus
    their folder), then one fsync'd RocksDB batch, strictly in sequence."""

    def __init__(self, root: Path, rows: pa.Table) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._db = rocksdict.Rdict(str(root / "db"))
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self._rows = rows
        self._n = 0
        self.latencies: list[float] = []

    def run(self, iterations: int) -> None:
        for _ in range(iterations):
            t0 = time.perf_counter()
            self._n += 1
            for k in range(4):
                path = self.root / f"{self._n:06d}-{k}.parquet"
                pq.write_table(self._rows, path)
                fsync_path(str(path))
            fsync_path(str(self.root))
            batch = rocksdict.WriteBatch()
            batch.put(f"pointer-{self._n}".encode(), b"x" * 256)
            self._db.write(batch, self._sync)
            self.latencies.append(time.perf_counter() - t0)
            for k in range(4):
                (self.root / f"{self._n:06d}-{k}.parquet").unlink()

    @property
    def rate(self) -> float:
        return len(self.latencies) / sum(self.latencies)

    def close(self) -> None:
        self._db.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def setup_tables(warehouse: Path, schema: pa.Schema, names: list[str]) -> None:
    cat = RocksCatalog("bench", warehouse=str(warehouse), **{"read-only": "false"})
    cat.create_namespace("bench")
    for name in names:
        cat.create_table(f"bench.{name}", schema)
    cat.close()


def sql_catalog(root: Path) -> SqlCatalog:
    root.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("base", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")


def timed_scans(warehouse: Path, names: list[str], rounds: int = 9) -> dict[str, tuple[float, int]]:
    """Median time of a pyiceberg ``load_table`` + ``scan().to_arrow()`` of each table, and its
    rows. The tables alternate round by round, so a burst of other work on the machine (the
    server's background maintenance just after an append run) hits them alike."""
    cat = RocksCatalog("reader", warehouse=str(warehouse), **{"read-only": "true"})
    try:
        times: dict[str, list[float]] = {name: [] for name in names}
        rows: dict[str, int] = {}
        for _ in range(rounds):
            for name in names:
                start = time.perf_counter()
                rows[name] = cat.load_table(f"bench.{name}").scan().to_arrow().num_rows
                times[name].append(time.perf_counter() - start)
        return {name: (statistics.median(times[name]), rows[name]) for name in names}
    finally:
        cat.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes for development")
    parser.add_argument("--bulk-rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument(
        "--baseline-commits", type=int, default=None, help="pyiceberg appends (default: as many as --commits)"
    )
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    if args.quick:
        args.bulk_rows, args.commits, args.baseline_commits = 1_000_000, 200, args.baseline_commits or 15
    if args.baseline_commits is None:
        args.baseline_commits = args.commits
    results: dict[str, Any] = {"config": vars(args), "load_average_start": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="icefloe-bench-appends-"))

    # -- 1. bulk ---------------------------------------------------------------------------
    bulk = make_rows(args.bulk_rows)
    base = sql_catalog(tmp / "pyiceberg")
    base.create_namespace("bench")
    base_table = base.create_table("bench.bulk", bulk.schema)
    start = time.perf_counter()
    base_table.append(bulk)
    base_bulk_s = time.perf_counter() - start

    warehouse = tmp / "icefloe"
    small = make_rows(args.small_rows)
    setup_tables(warehouse, bulk.schema, ["bulk", "seq", "conc", "once"])
    server = ServeProcess(warehouse)
    try:
        client = flight.FlightClient(server.location)
        start = time.perf_counter()
        result = do_put(client, ("bench", "bulk"), bulk)
        ours_bulk_s = time.perf_counter() - start
        assert result["rows"] == args.bulk_rows
        del bulk
        results["bulk"] = {
            "rows": args.bulk_rows,
            "pyiceberg_s": base_bulk_s,
            "icefloe_doput_s": ours_bulk_s,
            "pyiceberg_rows_per_s": args.bulk_rows / base_bulk_s,
            "icefloe_rows_per_s": args.bulk_rows / ours_bulk_s,
            "ratio": base_bulk_s / ours_bulk_s,
        }

        # -- 2. small appends --------------------------------------------------------------
        base_small = base.create_table("bench.small", small.schema)
        base_latencies: list[float] = []
        for _ in range(args.baseline_commits):
            t0 = time.perf_counter()
            base_small.append(small)
            base_latencies.append(time.perf_counter() - t0)
        base_rate = args.baseline_commits / sum(base_latencies)
        base_first50_rate = min(50, len(base_latencies)) / sum(base_latencies[:50])

        # Sequential appends in rounds, each followed by a round of the floor.
        floor = Floor(tmp / "floor", small)
        latencies: list[float] = []
        rounds = max(1, args.commits // 100)
        for r in range(rounds):
            lo, hi = r * args.commits // rounds, (r + 1) * args.commits // rounds
            for i in range(lo, hi):
                rows = make_rows(args.small_rows, i * args.small_rows)
                t0 = time.perf_counter()
                do_put(client, ("bench", "seq"), rows)
                latencies.append(time.perf_counter() - t0)
            floor.run(max(10, (hi - lo) // 4))
        seq_rate = len(latencies) / sum(latencies)
        seq_floor_rate = floor.rate
        window = min(100, args.commits // 4)
        growth = statistics.median(latencies[-window:]) / statistics.median(latencies[:window])

        per_writer = args.commits // args.writers
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            c = flight.FlightClient(server.location)
            try:
                for i in range(per_writer):
                    do_put(c, ("bench", "conc"), make_rows(args.small_rows, (w * per_writer + i) * args.small_rows))
            except BaseException as exc:
                errors.append(exc)
            finally:
                c.close()

        floor.latencies.clear()
        floor.run(50)
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        conc_rate = args.writers * per_writer / (time.perf_counter() - start)
        floor.run(50)
        conc_floor_rate = floor.rate
        floor.close()
        if errors:
            raise errors[0]
        results["small"] = {
            "rows_per_append": args.small_rows,
            "floor_appends_per_s_sequential_rounds": seq_floor_rate,
            "floor_appends_per_s_around_concurrent": conc_floor_rate,
            "sequential_over_floor": seq_rate / seq_floor_rate,
            "concurrent_over_floor": conc_rate / conc_floor_rate,
            "sequential_p50_ms": statistics.median(latencies) * 1000,
            "sequential_p99_ms": percentile(latencies, 0.99) * 1000,
            "sequential_p99_over_p50": percentile(latencies, 0.99) / statistics.median(latencies),
            "pyiceberg_sql_appends_per_s": base_rate,
            "pyiceberg_sql_commits": args.baseline_commits,
            "pyiceberg_sql_first50_appends_per_s": base_first50_rate,
            "icefloe_sequential_appends_per_s": seq_rate,
            "icefloe_concurrent_appends_per_s": conc_rate,
            "sequential_ratio": seq_rate / base_rate,
            "concurrent_ratio": conc_rate / base_rate,
            "first_window_median_ms": statistics.median(latencies[:window]) * 1000,
            "last_window_median_ms": statistics.median(latencies[-window:]) * 1000,
            "growth_last_over_first": growth,
            "window": window,
        }

        # -- 3. scans ----------------------------------------------------------------------
        do_put(client, ("bench", "once"), make_rows(args.small_rows * args.commits))
        (before_s, before_rows), (once_before_s, _) = timed_scans(warehouse, ["seq", "once"]).values()
        action = flight.Action("icefloe.maintain", json.dumps({"table": "bench.seq"}).encode())
        list(client.do_action(action))
        (after_s, after_rows), (once_s, once_rows) = timed_scans(warehouse, ["seq", "once"]).values()
        assert before_rows == after_rows == once_rows == args.small_rows * args.commits
        results["scan"] = {
            "rows": once_rows,
            "written_at_once_s": once_s,
            "small_appends_before_explicit_maintain_s": before_s,
            "small_appends_after_maintain_s": after_s,
            "after_maintain_over_at_once": after_s / once_s,
            "before_maintain_over_at_once": before_s / once_before_s,
        }
        client.close()
    except BaseException:
        sys.stderr.write("".join(server.log_tail))
        raise
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    results["load_average_end"] = os.getloadavg()
    b, s, c = results["bulk"], results["small"], results["scan"]
    conc_floor = s["floor_appends_per_s_around_concurrent"]
    lines = [
        f"{'measure':58} {'value':>14} {'target':>10}",
        f"{'bulk: pyiceberg Table.append rows/s':58} {b['pyiceberg_rows_per_s']:>14,.0f}",
        f"{'bulk: icefloe DoPut rows/s':58} {b['icefloe_rows_per_s']:>14,.0f}",
        f"{'bulk: ratio icefloe / pyiceberg':58} {b['ratio']:>14.2f} {'>= 1.0':>10}",
        f"{'floor: 4 files + fsync + RocksDB batch, appends/s':58} "
        f"{s['floor_appends_per_s_sequential_rounds']:>14.1f}",
        f"{'small: pyiceberg SqlCatalog appends/s (' + str(s['pyiceberg_sql_commits']) + ' commits)':58} "
        f"{s['pyiceberg_sql_appends_per_s']:>14.1f}",
        f"{'small: pyiceberg SqlCatalog appends/s (its first 50)':58} "
        f"{s['pyiceberg_sql_first50_appends_per_s']:>14.1f}",
        f"{'small: icefloe sequential DoPut appends/s':58} {s['icefloe_sequential_appends_per_s']:>14.1f}",
        f"{'small: sequential / floor':58} {s['sequential_over_floor']:>14.2f} {'>= 0.5':>10}",
        f"{'small: sequential p50 ms':58} {s['sequential_p50_ms']:>14.2f}",
        f"{'small: sequential p99 / p50':58} {s['sequential_p99_over_p50']:>14.2f} {'<= 3':>10}",
        f"{'small: sequential / pyiceberg SqlCatalog':58} {s['sequential_ratio']:>14.1f}",
        f"{'small: icefloe ' + str(args.writers) + ' concurrent writers appends/s':58} "
        f"{s['icefloe_concurrent_appends_per_s']:>14.1f}",
        f"{'small: concurrent / floor (floor around it: ' + format(conc_floor, '.0f') + '/s)':58} "
        f"{s['concurrent_over_floor']:>14.2f} {'>= 2':>10}",
        f"{'small: concurrent / pyiceberg SqlCatalog':58} {s['concurrent_ratio']:>14.1f}",
        f"{'small: per-commit growth (last/first ' + str(s['window']) + ' median)':58} "
        f"{s['growth_last_over_first']:>14.2f} {'<= 1.5':>10}",
        f"{'scan: small appends after maintain / written at once':58} {c['after_maintain_over_at_once']:>14.2f} "
        f"{'<= 1.2':>10}",
        f"{'scan: small appends before explicit maintain / at once':58} {c['before_maintain_over_at_once']:>14.2f}",
    ]
    load = results["load_average_start"][0], results["load_average_end"][0]
    lines.append(f"load average: start {load[0]:.1f}, end {load[1]:.1f}")
    print("\n".join(lines))
    save_run("appends", results)


if __name__ == "__main__":
    main()
