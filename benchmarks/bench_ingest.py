"""Files ingest throughput: an ingest connector vs ``icefloe load`` of the same files.

One real server, one folder of Parquet files. Each round, in alternating order:
- baseline: ``icefloe load`` of every file into a fresh table (``flight_server.cli.load.run_load``,
  the command's own code in this process, so interpreter start-ups are not counted against it);
- ingest: a files connector on the folder into another fresh table, one ``icefloe ingest run
  --once`` pass (DoAction ``icefloe.ingest.run``), timed from the request to its answer.
Rows per second of each; the ratio ingest / load is quoted as the median of ``--rounds`` rounds
(target >= 0.9x), with the load average of the machine before and after.

With ``--cdc``: Postgres CDC end-to-end lag instead (``bench_ingest_cdc``): source commit -> the
Iceberg commit holding it seen on the ``commits.v1`` feed, p50 / p99 at ``--cdc-rate`` changes/s,
median of ``--rounds`` rounds, with the load average.

Usage: python benchmarks/bench_ingest.py [--files 8] [--rows-per-file 250000] [--rounds 3]
       python benchmarks/bench_ingest.py --cdc [--cdc-rate 1000] [--cdc-seconds 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

from flight_server.cli.connect import Connection  # noqa: E402
from flight_server.cli.load import run_load  # noqa: E402


def make_files(folder: Path, files: int, rows: int) -> None:
    folder.mkdir(parents=True)
    for index in range(files):
        ids = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
        table = pa.table({"id": ids, "v": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                          "s": pc.binary_join_element_wise("r", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), "")})
        pq.write_table(table, folder / f"part-{index:04d}.parquet")


def sql(proc: ServerProcess, statement: str) -> None:
    import adbc_driver_flightsql.dbapi as dbapi

    with dbapi.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)


def action(proc: ServerProcess, name: str, body: dict[str, Any]) -> Any:
    client = flight.connect(proc.location)
    try:
        raw = list(client.do_action(flight.Action(name, json.dumps(body).encode())))[0].body.to_pybytes()
        return json.loads(raw)
    finally:
        client.close()


def run_baseline(proc: ServerProcess, folder: Path, table: str) -> float:
    sql(proc, f"CREATE TABLE {table} (id BIGINT, v DOUBLE, s VARCHAR)")
    conn = Connection(proc.location)
    started = time.perf_counter()
    for path in sorted(folder.glob("*.parquet")):
        run_load(conn, str(path), table, None, False, 65536, ",", False, None)
    return time.perf_counter() - started


def run_ingest(proc: ServerProcess, folder: Path, table: str, name: str) -> tuple[float, int]:
    sql(proc, f"CREATE TABLE {table} (id BIGINT, v DOUBLE, s VARCHAR)")
    # Added paused, so the timed pass is the one asked for (not the background thread's).
    action(proc, "icefloe.ingest.add", {"name": name, "table": table, "source": "files",
                                        "options": {"path": str(folder)}, "paused": True})
    started = time.perf_counter()
    answer = action(proc, "icefloe.ingest.run", {"name": name, "once": True})
    return time.perf_counter() - started, int(answer["run"]["rows"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cdc", action="store_true", help="Postgres CDC lag instead of files throughput")
    parser.add_argument("--cdc-rate", type=float, default=1000.0)
    parser.add_argument("--cdc-seconds", type=float, default=20.0)
    parser.add_argument("--cdc-tables", type=int, choices=(1, 2), default=1,
                        help="2: one connector, two tables, every source transaction touching both")
    args = parser.parse_args()
    if args.cdc:
        main_cdc(args)
        return
    total = args.files * args.rows_per_file
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        folder = Path(tmp) / "src"
        make_files(folder, args.files, args.rows_per_file)
        proc = ServerProcess(Path(tmp) / "warehouse").start()
        rounds: list[dict[str, float]] = []
        try:
            sql(proc, "CREATE SCHEMA bench")
            for round_no in range(args.rounds):
                first_ingest = round_no % 2 == 1
                timings: dict[str, float] = {}
                for which in (("ingest", "load") if first_ingest else ("load", "ingest")):
                    if which == "load":
                        timings["load_s"] = run_baseline(proc, folder, f"bench.load_{round_no}")
                    else:
                        seconds, rows = run_ingest(proc, folder, f"bench.ingest_{round_no}", f"bench{round_no}")
                        assert rows == total, f"ingest took {rows} rows, not {total}"
                        timings["ingest_s"] = seconds
                timings["load_rows_per_s"] = total / timings["load_s"]
                timings["ingest_rows_per_s"] = total / timings["ingest_s"]
                timings["ratio"] = timings["ingest_rows_per_s"] / timings["load_rows_per_s"]
                rounds.append(timings)
                print(f"round {round_no + 1}: load {timings['load_rows_per_s']:,.0f} rows/s, ingest "
                      f"{timings['ingest_rows_per_s']:,.0f} rows/s, ratio {timings['ratio']:.2f}x", flush=True)
        finally:
            proc.stop()
    load_after = os.getloadavg()
    summary = {
        "rows": total, "files": args.files, "rounds": rounds,
        "median_load_rows_per_s": statistics.median(r["load_rows_per_s"] for r in rounds),
        "median_ingest_rows_per_s": statistics.median(r["ingest_rows_per_s"] for r in rounds),
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "target_ratio": 0.9,
        "load_average_before": load_before, "load_average_after": load_after,
    }
    print()
    print(f"{'':24}{'rows/s (median)':>18}")
    print(f"{'icefloe load':24}{summary['median_load_rows_per_s']:>18,.0f}")
    print(f"{'ingest (files)':24}{summary['median_ingest_rows_per_s']:>18,.0f}")
    print(f"ratio ingest / load: {summary['median_ratio']:.2f}x (target >= 0.9x); load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    save_run("ingest", summary)


def main_cdc(args: argparse.Namespace) -> None:
    from bench_ingest_cdc import run

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-cdc-") as tmp:
        summary = run(Path(tmp), args.rounds, args.cdc_rate, args.cdc_seconds, args.cdc_tables)
    load_after = os.getloadavg()
    summary.update(load_average_before=load_before, load_average_after=load_after)
    print(f"postgres CDC lag at {args.cdc_rate:.0f} changes/s over {args.cdc_tables} table(s) (median of "
          f"{args.rounds}): p50 "
          f"{summary['median_p50_ms']:.0f} ms, p99 {summary['median_p99_ms']:.0f} ms; load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    save_run("ingest_cdc" if args.cdc_tables == 1 else "ingest_cdc_two_tables", summary)


if __name__ == "__main__":
    main()
