"""Rust change scans (``icefloe_feed::Client::changes``): endpoints read in parallel vs one at a time.

A table gets ``--appends`` appends of ``--rows`` rows (through DoPut, as in
``bench_change_scan.py``). The Rust example ``bench_changes`` (release build) reads the change
scan of all of them, split into ``--partitions`` endpoints, with ``parallelism`` 1 (one DoGet
after another, the baseline) and ``--parallel`` (that many DoGets at once), alternating, in one
process against one server. Reported: each one's median latency and parallel / sequential.

Usage: python benchmarks/bench_rust_change_scan.py [--appends 48] [--rows 20000] [--partitions 8]
       [--parallel 4] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_change_scan import append_all, make_table  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

WORKSPACE = ROOT / "clients" / "rust"


def reader_binary() -> Path:
    """Build the example (release) into the cached target folder scripts/test-rust uses."""
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = Path(os.environ.get("CARGO_TARGET_DIR", cache_home / "icefloe" / "cargo-target"))
    subprocess.run(["cargo", "build", "--release", "--locked", "--example", "bench_changes"], cwd=WORKSPACE,
                   env={**os.environ, "CARGO_TARGET_DIR": str(target)}, check=True)
    return target / "release" / "examples" / "bench_changes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=48)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    binary = reader_binary()
    with tempfile.TemporaryDirectory(prefix="bench-rust-changes-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        make_table(warehouse)
        server = ServerProcess(warehouse).start()
        try:
            started = time.perf_counter()
            head = append_all(server.location, args.appends, args.rows)
            append_s = time.perf_counter() - started
            after = head - args.appends
            out = subprocess.run(
                [str(binary), server.location, "bench.events", str(after), str(head), str(args.partitions),
                 str(args.rounds), f"1,{args.parallel}"],
                check=True, capture_output=True, text=True).stdout
        finally:
            server.stop()
    reads = [json.loads(line) for line in out.splitlines() if line.strip()]
    expected = args.appends * args.rows
    assert all(r["rows"] == expected for r in reads), "every read returns every row"
    endpoints = reads[0]["endpoints"]
    timings: dict[str, list[float]] = {"parallelism 1": [], f"parallelism {args.parallel}": []}
    for r in reads:
        timings[f"parallelism {r['parallelism']}"].append(r["ms"])
    medians = {name: statistics.median(samples) for name, samples in timings.items()}
    ratio = medians[f"parallelism {args.parallel}"] / medians["parallelism 1"]
    load = os.getloadavg()[0]
    print(f"{args.appends} appends of {args.rows} rows in {append_s:.1f} s; {endpoints} endpoints; "
          f"load {load:.2f}")
    print(f"{'read':<18}{'median ms':>12}")
    for name, ms in medians.items():
        print(f"{name:<18}{ms:>12.2f}")
    print(f"parallel / sequential: {ratio:.2f}x")
    result: dict[str, Any] = {
        "appends": args.appends, "rows_per_append": args.rows, "endpoints": endpoints, "rounds": args.rounds,
        "median_ms": medians, "ratio_parallel_over_sequential": ratio, "load_average": load,
    }
    save_run("rust_change_scan", result)


if __name__ == "__main__":
    main()
