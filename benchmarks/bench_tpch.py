"""TPC-H over Flight SQL: icefloe vs DuckDB in process (the floor) vs a DataFusion Flight SQL
server (the peer a user would pick instead), all 22 queries, on the same data.

- data: ``tpchgen-cli parquet -s SCALE`` (PyPI; ``pip install icefloe[bench]``), generated once
  into ``~/.cache/icefloe/tpch/sf<SCALE>``. Its string columns are ``string_view``.
- icefloe: a real ``icefloe serve`` child; every table loaded with ``icefloe load FILE
  tpch.<table> --create`` (the append path, as a user would: tpchgen's files are already in
  key order, so the tables are sorted by their keys), then each query over Flight SQL via ADBC.
- duckdb: DuckDB in this process over tpchgen's Parquet files (views over ``read_parquet``).
- duckdb_on_icefloe_files: DuckDB in this process over the data files icefloe wrote: with
  ``duckdb``, it splits each icefloe ratio into what the files cost (row groups, compression,
  statistics) and what the server path costs.
- duckdb_arrow_on_icefloe_files: the same files as ``pyarrow.dataset``s registered in DuckDB,
  which is how icefloe's sandbox receives table data (it may read no file itself): with the
  one before, what the Arrow dataset scan costs (no native Parquet reader, and no cardinality
  for DuckDB's join order optimizer: every such scan is estimated at one row); icefloe's ratio
  to it is what Flight SQL, planning and the sandbox cost.
- peer: ``benchmarks/datafusion_peer`` (datafusion-flight-sql-server 0.4.19, DataFusion 55.2,
  built once with cargo; skipped, saying why, without it) over tpchgen's files, via ADBC.

Each query: one warm-up per target, then ``--runs`` rounds, the targets in rotating order in
each round; the median per target. Every target's answer is checked against DuckDB's (numbers
to 1e-9 relative). Prints a table per query and the geometric means of the ratios; writes
a run file ``benchmarks/results/tpch_sf<SCALE>-<UTC time>.json``.

At scale factor 10 the Arrow-dataset target (no longer icefloe's read path for local tables,
and the slowest of the five) can be left out with ``--no-arrow-datasets``; a warehouse loaded
once with ``--keep-warehouse DIR`` is served again, without loading, with ``--reuse-warehouse
DIR``. The run file also records each process's peak resident memory (``peak_rss_mib``).

Usage: python benchmarks/bench_tpch.py [--scale 1] [--runs 3] [--queries 1,6,18] [--no-peer]
       [--no-arrow-datasets] [--keep-warehouse DIR | --reuse-warehouse DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
from adbc_driver_flightsql import DatabaseOptions
from adbc_driver_flightsql import dbapi as flightsql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_flightsql_scan import BareProcess, peer_binary  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402
from tpch_queries import NUMBERS, TABLES, query, rows_of, same_answer  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "icefloe" / "tpch"
PEER = "datafusion-flight-sql-server 0.4.19, DataFusion 55.2"


def tpchgen() -> str | None:
    found = shutil.which("tpchgen-cli")
    if found is None:
        beside = Path(sys.executable).parent / "tpchgen-cli"  # the venv's, when not on PATH
        found = str(beside) if beside.exists() else None
    return found


def generate(scale: float, out: Path) -> Path:
    """tpchgen's Parquet files for ``scale`` in ``out`` (generated once; cached)."""
    if all((out / f"{t}.parquet").exists() for t in TABLES):
        return out
    tool = tpchgen()
    if tool is None:
        raise SystemExit("tpchgen-cli is not installed: pip install 'icefloe[bench]' (or tpchgen-cli)")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    subprocess.run([tool, "parquet", "-s", str(scale), "--output-dir", str(partial)], check=True)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def scale_name(scale: float) -> str:
    return f"sf{scale:g}".replace(".", "_")


def load(server: ServerProcess, data: Path) -> dict[str, float]:
    """Every table through ``icefloe load --create``; seconds per table."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seconds = {}
    for table in TABLES:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flight_server.cli", "load", "--uri", server.location,
                        str(data / f"{table}.parquet"), f"tpch.{table}", "--create"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        seconds[table] = time.perf_counter() - start
    return seconds


def icefloe_files(warehouse: Path, table: str) -> list[str]:
    """The data files of a table that only ever had appends (every file is live)."""
    return sorted(str(p) for p in (warehouse / "tpch" / table / "data").rglob("*.parquet"))


def duckdb_over(files: dict[str, list[str]], arrow: bool = False) -> duckdb.DuckDBPyConnection:
    """DuckDB in this process with a view per table over ``files``: DuckDB's own Parquet
    reader, or (``arrow``) a registered ``pyarrow.dataset`` as icefloe's sandbox gets them."""
    connection = duckdb.connect(":memory:")
    for table, paths in files.items():
        if arrow:
            connection.register(f"arrow_{table}", ds.dataset(paths, format="parquet"))
            connection.execute(f"CREATE VIEW {table} AS SELECT * FROM arrow_{table}")
            continue
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
        connection.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{listed}])")
    return connection


class Target:
    """Something that answers TPC-H queries: run(n) -> (seconds, rows)."""

    def __init__(self, name: str, run: Any) -> None:
        self.name, self.run = name, run


# The client's largest message: ADBC's default (16 MiB) refuses a server that sends a result as
# one big message (the DataFusion peer sends SF10's Q10, 20 rows, as one 92-108 MB message). The
# same for every server; icefloe cuts its messages at 4 MiB.
MAX_MESSAGE_BYTES = 1 << 30


def adbc_target(name: str, location: str, prefix: str) -> tuple[Target, Any]:
    connection = flightsql.connect(
        location, autocommit=True,
        db_kwargs={DatabaseOptions.WITH_MAX_MSG_SIZE.value: str(MAX_MESSAGE_BYTES)})

    def run(n: int) -> Any:
        with connection.cursor() as cur:
            cur.execute(query(n, prefix))
            return cur.fetch_arrow_table()

    return Target(name, run), connection


def inprocess_target(name: str, connection: duckdb.DuckDBPyConnection) -> Target:
    def run(n: int) -> Any:
        return connection.sql(query(n)).to_arrow_table()

    return Target(name, run)


def measure(targets: list[Target], numbers: list[int], runs: int) -> dict[str, Any]:
    times: dict[str, dict[int, list[float]]] = {t.name: {} for t in targets}
    mismatches: dict[str, dict[int, str]] = {t.name: {} for t in targets}
    for n in numbers:
        reference = None
        for target in targets:  # warm-up, and the answer checked against DuckDB's
            answer = rows_of(target.run(n))
            if reference is None:
                reference = answer
            else:
                differs = same_answer(reference, answer)
                if differs is not None:
                    mismatches[target.name][n] = differs
        for r in range(runs):
            order = targets[r % len(targets):] + targets[: r % len(targets)]
            for target in order:
                start = time.perf_counter()
                target.run(n)
                times[target.name].setdefault(n, []).append(time.perf_counter() - start)
        line = "  ".join(f"{t.name} {statistics.median(times[t.name][n]) * 1e3:8.1f} ms" for t in targets)
        print(f"Q{n:<2} {line}", file=sys.stderr, flush=True)
    return {"times": times, "mismatches": mismatches}


def peak_rss_mib(pid: int) -> float | None:
    """A live process's peak resident set so far (Linux ``VmHWM``), in MiB; None elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def report(args: argparse.Namespace, numbers: list[int], measured: dict[str, Any], load_s: dict[str, float],
           peer_note: str, load_before: tuple[float, float, float],
           peak_rss: dict[str, float | None]) -> dict[str, Any]:
    times = measured["times"]
    median = {name: {n: statistics.median(v) for n, v in per.items()} for name, per in times.items()}
    base = median["duckdb"]
    ratios: dict[str, dict[int, float]] = {
        name: {n: per[n] / base[n] for n in numbers} for name, per in median.items() if name != "duckdb"
    }
    if "peer" in median:
        ratios["icefloe_vs_peer"] = {n: median["icefloe"][n] / median["peer"][n] for n in numbers}
    # icefloe over DuckDB on icefloe's own files: the server path alone, files held equal
    ratios["icefloe_vs_duckdb_on_its_files"] = {
        n: median["icefloe"][n] / median["duckdb_on_icefloe_files"][n] for n in numbers}
    if "duckdb_arrow_on_icefloe_files" in median:
        # the sandbox's Arrow dataset scan alone, files held equal
        ratios["arrow_datasets_vs_duckdb_reader"] = {
            n: median["duckdb_arrow_on_icefloe_files"][n] / median["duckdb_on_icefloe_files"][n] for n in numbers}
        # icefloe over the same Arrow datasets in process: Flight SQL, planning, the sandbox
        ratios["icefloe_vs_duckdb_arrow_on_its_files"] = {
            n: median["icefloe"][n] / median["duckdb_arrow_on_icefloe_files"][n] for n in numbers}
    geo = {name: geomean(list(per.values())) for name, per in ratios.items()}
    result = {
        "scale": args.scale,
        "runs": args.runs,
        "queries": numbers,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "peer": PEER if "peer" in median else f"skipped: {peer_note}",
        "load_seconds": load_s,
        "peak_rss_mib": peak_rss,
        "median_ms": {name: {str(n): v * 1e3 for n, v in per.items()} for name, per in median.items()},
        "ratio_to_duckdb": {name: {str(n): v for n, v in per.items()} for name, per in ratios.items()},
        "geomean": geo,
        "targets": {"icefloe_vs_duckdb": "<= 1.3", "icefloe_vs_peer": "<= 1.0"},
        "answers_differ": measured["mismatches"],
    }
    names = list(median)
    print(f"TPC-H SF{args.scale:g}, median of {args.runs} after a warm-up; load average "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores)")
    print("query " + "".join(f"{n[:24]:>26}" for n in names) + f"{'icefloe/duckdb':>16}" + f"{'icefloe/peer':>14}")
    for n in numbers:
        cells = "".join(f"{median[name][n] * 1e3:23.1f} ms" for name in names)
        vs_peer = f"{ratios['icefloe_vs_peer'][n]:14.2f}" if "icefloe_vs_peer" in ratios else f"{'-':>14}"
        print(f"Q{n:<4}{cells}{ratios['icefloe'][n]:16.2f}{vs_peer}")
    print("geometric mean of ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in geo.items()))
    print("targets: icefloe/duckdb <= 1.3, icefloe/peer <= 1.0"
          + ("" if "peer" in median else f"; peer skipped: {peer_note}"))
    bad = {k: v for k, v in measured["mismatches"].items() if v}
    print("answers: " + ("all equal to DuckDB's" if not bad else f"DIFFER: {bad}"))
    print("peak resident memory: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in peak_rss.items() if v is not None))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queries", default="", help="e.g. 1,6,18 (default: all 22)")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--no-arrow-datasets", action="store_true",
                        help="leave out DuckDB over icefloe's files as Arrow datasets (the slowest target)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--keep-warehouse", default="", help="load into this folder and leave it there")
    where.add_argument("--reuse-warehouse", default="", help="serve this folder, loaded by --keep-warehouse before")
    args = parser.parse_args()
    numbers = [int(q) for q in args.queries.split(",")] if args.queries else list(NUMBERS)
    data = generate(args.scale, CACHE / scale_name(args.scale))
    peer_bin, peer_note = (None, "--no-peer") if args.no_peer else peer_binary()
    if peer_bin is None:
        print(f"peer skipped: {peer_note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="icefloe-tpch-") as tmp:
        warehouse = Path(args.reuse_warehouse or args.keep_warehouse or Path(tmp) / "warehouse")
        if args.reuse_warehouse and not icefloe_files(warehouse, "lineitem"):
            raise SystemExit(f"{warehouse} holds no loaded TPC-H tables (load one with --keep-warehouse)")
        server = ServerProcess(warehouse).start()
        peer = None
        connections = []
        peak_rss: dict[str, float | None] = {}
        try:
            load_s = {} if args.reuse_warehouse else load(server, data)
            peak_rss["server_after_load"] = peak_rss_mib(server.proc.pid)
            print("loaded: " + ", ".join(f"{t} {s:.1f}s" for t, s in load_s.items()), file=sys.stderr)
            source = duckdb_over({t: [str(data / f"{t}.parquet")] for t in TABLES})
            own_files = {t: icefloe_files(warehouse, t) for t in TABLES}
            own = duckdb_over(own_files)
            targets = [inprocess_target("duckdb", source)]
            icefloe, conn = adbc_target("icefloe", server.location, "tpch.")
            targets.append(icefloe)
            connections.append(conn)
            targets.append(inprocess_target("duckdb_on_icefloe_files", own))
            if not args.no_arrow_datasets:
                targets.append(inprocess_target("duckdb_arrow_on_icefloe_files", duckdb_over(own_files, arrow=True)))
            if peer_bin is not None:
                peer = BareProcess([str(peer_bin), *(f"{t}={data / f'{t}.parquet'}" for t in TABLES)])
                peer_target, conn = adbc_target("peer", peer.location, "")
                targets.append(peer_target)
                connections.append(conn)
            load_before = os.getloadavg()
            measured = measure(targets, numbers, args.runs)
            peak_rss["server"] = peak_rss_mib(server.proc.pid)
            peak_rss["peer"] = peak_rss_mib(peer.proc.pid) if peer is not None else None
            peak_rss["bench_process"] = peak_rss_mib(os.getpid())  # the in-process DuckDB targets
        finally:
            for conn in connections:
                conn.close()
            server.stop()
            if peer is not None:
                peer.stop()
    result = report(args, numbers, measured, load_s, peer_note, load_before, peak_rss)
    save_run(f"tpch_{scale_name(args.scale)}", result)


if __name__ == "__main__":
    main()
