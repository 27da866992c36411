"""The public Python API: ``t.scan()`` into polars, in-process and remote, vs ``pl.read_parquet``; pipe throughput.

Same run, same files, alternating order each round:
- baseline: ``pl.read_parquet(files)`` over exactly the table's data files;
- in-process: ``pl.DataFrame(icefloe.open(wh).table(t).scan())`` (target >= 0.8x the baseline);
- remote: the same over ``icefloe.connect(uri)`` against a real server on the warehouse.
Pipe: a source of ``--commits`` small appends piped into a sink in one step (the default), and the
first ``--per-commit`` of them with one sink commit per source commit (``max_commits=1``), in rows/s
and source commits/s.
Thin-client start-up: a fresh interpreter that runs ``import icefloe``, ``icefloe.connect(uri)`` and
one one-row query (``lake.table("bench.one").scan().to_table()``), vs one that does the same with
bare ``pyarrow.flight`` (import, connect, GetFlightInfo + DoGet of ``SELECT * FROM bench.one``);
``--thin-runs`` runs of each in alternation, medians of wall time from start to exit (target:
icefloe <= 1.3x the bare client).

Usage: python benchmarks/bench_embedded.py [--rows 10000000] [--rounds 3] [--commits 1000] [--per-commit 200]
                                           [--thin-runs 9] [--only-thin]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

import icefloe  # noqa: E402

PARTS = 10


def build_table(warehouse: Path, rows: int) -> list[str]:
    """ns.big with ``rows`` rows (id, v, s) in PARTS appends; returns its data file paths."""
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("bench")
        t = lake.create_table("bench.big", schema=pa.schema([("id", pa.int64()), ("v", pa.float64()),
                                                                ("s", pa.string())]))
        step = rows // PARTS
        for part in range(PARTS):
            ids = pa.array(range(part * step, (part + 1) * step), pa.int64())
            t.append(pa.table({"id": ids, "v": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                               "s": pc.binary_join_element_wise("r", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()),
                                                                "")}))
        table = lake.backend.catalog.load_table(("bench", "big"))  # type: ignore[attr-defined]
        return [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]


def timed(fn: Any) -> tuple[float, int]:
    start = time.perf_counter()
    df = fn()
    return time.perf_counter() - start, int(df.height)


def bench_scans(rows: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        files = build_table(warehouse, rows)
        server = ServerProcess(warehouse).start()
        try:
            local = icefloe.open(warehouse)  # read-only beside the server
            remote = icefloe.connect(server.location)
            runs: dict[str, list[float]] = {"read_parquet": [], "in_process": [], "remote": []}
            cases = {
                "read_parquet": lambda: pl.read_parquet(files),
                "in_process": lambda: pl.DataFrame(local.table("bench.big").scan()),
                "remote": lambda: pl.DataFrame(remote.table("bench.big").scan()),
            }
            for r in range(rounds):
                order = list(cases) if r % 2 == 0 else list(reversed(cases))
                for name in order:
                    seconds, height = timed(cases[name])
                    assert height == rows, (name, height)
                    runs[name].append(seconds)
            local.close()
            remote.close()
        finally:
            server.stop()
    med = {name: statistics.median(v) for name, v in runs.items()}
    return {
        "rows": rows,
        "files": len(files),
        "seconds": runs,
        "median_s": med,
        "in_process_vs_read_parquet": med["read_parquet"] / med["in_process"],
        "remote_vs_read_parquet": med["read_parquet"] / med["remote"],
        "remote_vs_in_process": med["in_process"] / med["remote"],
    }


def bench_pipe(commits: int, per_commit: int) -> dict[str, Any]:
    out: dict[str, Any] = {"source_commits": commits, "rows_per_commit": 10}
    with tempfile.TemporaryDirectory(prefix="bench-pipe-") as tmp:
        with icefloe.open(Path(tmp) / "warehouse") as lake:
            lake.create_namespace("p")
            schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
            source = lake.create_table("p.src", schema=schema)
            for c in range(commits):
                ids = pa.array(range(c * 10, c * 10 + 10), pa.int64())
                source.append(pa.table({"id": ids, "v": ids}))
            first_seq = lake.head() - commits  # the seq before the first source commit
            for mode, max_commits, count in (("batched", 1_000_000, commits),
                                             ("one_sink_commit_per_source_commit", 1, per_commit)):
                sink = lake.create_table(f"p.dst_{max_commits}", schema=schema)
                stop_at = first_seq + count
                start = time.perf_counter()
                stats = icefloe.pipe(source=source, sink=sink, checkpoint=f"bench-{max_commits}", once=True,
                                     max_commits=max_commits, stop=_StopAt(sink, f"bench-{max_commits}", stop_at))
                seconds = time.perf_counter() - start
                assert stats.sink_rows >= count * 10, stats
                out[mode] = {"source_commits": count, "seconds": seconds, "rows_per_s": stats.sink_rows / seconds,
                             "source_commits_per_s": stats.sink_rows / 10 / seconds, "sink_commits": stats.commits}
    return out


THIN_ICEFLOE = """
import icefloe
lake = icefloe.connect({uri!r})
assert lake.table("bench.one").scan().to_table().num_rows == 1
"""
THIN_BARE = """
import pyarrow.flight as flight
client = flight.connect({uri!r})
info = client.get_flight_info(flight.FlightDescriptor.for_command(bytes.fromhex({command!r})))
assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 1
"""


def bench_thin_client(runs: int) -> dict[str, Any]:
    """Start-up of a remote client in a fresh process: icefloe vs bare pyarrow.flight."""
    from flight_server.flightsql import protocol as p

    with tempfile.TemporaryDirectory(prefix="bench-thin-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        with icefloe.open(warehouse) as lake:
            lake.create_namespace("bench")
            lake.create_table("bench.one", pa.schema([("id", pa.int64())])).append(
                pa.Table.from_arrays([pa.array([1], pa.int64())], names=["id"]))
        server = ServerProcess(warehouse).start()
        try:
            command = p.CommandStatementQuery(query="SELECT * FROM bench.one").pack().hex()
            scripts = {"icefloe": THIN_ICEFLOE.format(uri=server.location),
                       "pyarrow.flight": THIN_BARE.format(uri=server.location, command=command)}
            env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            times: dict[str, list[float]] = {name: [] for name in scripts}
            loads: list[float] = []
            for script in scripts.values():  # warm-up, not timed: the server's first plans, cold .pyc pages
                subprocess.run([sys.executable, "-c", script], check=True, env=env)
            for r in range(runs):
                order = list(scripts) if r % 2 == 0 else list(reversed(scripts))
                for name in order:
                    loads.append(os.getloadavg()[0])
                    start = time.perf_counter()
                    subprocess.run([sys.executable, "-c", scripts[name]], check=True, env=env)
                    times[name].append(time.perf_counter() - start)
        finally:
            server.stop()
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"runs": runs, "seconds": times, "median_s": median,
            "ratio": median["icefloe"] / median["pyarrow.flight"], "loadavg_median": statistics.median(loads)}


def print_thin(thin: dict[str, Any]) -> None:
    med = thin["median_s"]
    print(f"thin-client start-up (fresh process: import, connect, one 1-row query), median of {thin['runs']} runs")
    print(f"{'case':<28}{'seconds':>10}{'vs pyarrow.flight':>20}")
    for name in ("pyarrow.flight", "icefloe"):
        print(f"{name:<28}{med[name]:>10.3f}{med[name] / med['pyarrow.flight']:>19.2f}x")
    print(f"icefloe / pyarrow.flight start-up: {thin['ratio']:.2f}x (target <= 1.30x), "
          f"load average {thin['loadavg_median']:.2f}")


class _StopAt:
    """A ``stop`` event for ``icefloe.pipe`` that is set once the pipe's checkpoint reaches a seq."""

    def __init__(self, sink: icefloe.Table, name: str, seq: int) -> None:
        self.sink, self.name, self.seq = sink, name, seq

    def is_set(self) -> bool:
        found = icefloe.checkpoint_of(self.sink, self.name)
        return found is not None and found >= self.seq


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--per-commit", type=int, default=200)
    parser.add_argument("--thin-runs", type=int, default=9)
    parser.add_argument("--only-thin", action="store_true", help="run only the thin-client start-up row")
    args = parser.parse_args()
    load_before = os.getloadavg()
    thin = bench_thin_client(max(5, args.thin_runs))
    if args.only_thin:
        print_thin(thin)
        save_run("embedded_thin_client", thin)
        return
    scans = bench_scans(args.rows, args.rounds)
    pipe = bench_pipe(args.commits, args.per_commit)
    result = {"scans": scans, "pipe": pipe, "thin_client": thin, "loadavg_before": load_before,
              "loadavg_after": os.getloadavg()}
    med = scans["median_s"]
    print(f"scan of {scans['rows']:,} rows into polars ({scans['files']} files), median of {args.rounds} rounds")
    print(f"{'case':<28}{'seconds':>10}{'vs read_parquet':>18}")
    for name in ("read_parquet", "in_process", "remote"):
        print(f"{name:<28}{med[name]:>10.3f}{med['read_parquet'] / med[name]:>17.2f}x")
    print(f"remote vs in-process: {scans['remote_vs_in_process']:.2f}x")
    print(f"pipe over small source commits of {pipe['rows_per_commit']} rows")
    for mode in ("batched", "one_sink_commit_per_source_commit"):
        m = pipe[mode]
        print(f"{mode:<36}{m['source_commits']:>6} commits {m['seconds']:>8.2f} s {m['rows_per_s']:>10.0f} rows/s "
              f"{m['source_commits_per_s']:>8.1f} source commits/s")
    print_thin(thin)
    print(f"load average before {load_before[0]:.2f}, after {result['loadavg_after'][0]:.2f}")
    save_run("embedded", result)


if __name__ == "__main__":
    main()
