"""Scans of a table with row-level deletes vs the same rows without them (issue 38's figure).

A real ``icefloe serve`` holds, for each deleted share (1% and 10%):

- ``bench.d<P>``: ``--rows`` rows in ``--files`` INSERT ... SELECT statements (one data file
  each), merge-on-read, then ``DELETE ... WHERE id % 100 < P`` (position delete files);
- ``bench.c<P>``: the same surviving rows, file for file (one INSERT per id range of the
  first table): what compaction would leave, with no delete file to apply.

Each query runs on both tables, ``--repeat`` times after a warm-up, in alternating order; the
figure is the ratio of medians, deletes / compacted (target <= 1.3 at 1%), in wall time and in
the server's CPU time per query (which the load of other work moves less). Answers are checked
equal. ``--runs`` full runs (fresh server and tables); the report is the median over runs, with
the load average before and after each run.

    python benchmarks/bench_delete_scan.py [--rows 5000000] [--files 10] [--repeat 5] [--runs 3]
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

import adbc_driver_flightsql.dbapi as fsql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench_sql_writes import server_cpu  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

COLUMNS = "range AS id, CAST(range % 1000 AS INTEGER) AS k, range * 0.5 AS v, 'row-' || range AS s"
SHARES = (1, 10)
QUERIES = {
    "aggregate": "SELECT count(*), sum(v) FROM {t}",
    "filtered": "SELECT count(*), sum(id) FROM {t} WHERE k < 100",
    "group by": "SELECT k % 10 AS g, count(*), sum(v) FROM {t} GROUP BY g ORDER BY g",
}


def update(conn: Any, sql: str) -> int:
    with conn.cursor() as cur:
        cur.adbc_statement.set_sql_query(sql)
        return int(cur.adbc_statement.execute_update())


def timed(conn: Any, sql: str) -> tuple[Any, float]:
    with conn.cursor() as cur:
        start = time.perf_counter()
        cur.execute(sql)
        answer = cur.fetchall()
        return answer, time.perf_counter() - start


def one_run(rows: int, files: int, repeat: int) -> dict[str, Any]:
    per_file = rows // files
    result: dict[str, Any] = {"loadavg_before": list(os.getloadavg()), "ratios": {}, "median_s": {},
                              "cpu_ratios": {}, "server_cpu_median_s": {}}
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "warehouse").start()
        try:
            conn = fsql.connect(server.location, autocommit=True)
            update(conn, "CREATE SCHEMA bench")
            for share in SHARES:
                deleted, compacted = f"bench.d{share}", f"bench.c{share}"
                for table in (deleted, compacted):
                    update(conn, f"CREATE TABLE {table} (id BIGINT NOT NULL, k INTEGER, v DOUBLE, s VARCHAR)")
                update(conn, f"ALTER TABLE {deleted} SET ('write.delete.mode' = 'merge-on-read')")
                for f in range(files):
                    update(conn, f"INSERT INTO {deleted} SELECT {COLUMNS} "
                                 f"FROM range({f * per_file}, {(f + 1) * per_file})")
                update(conn, f"DELETE FROM {deleted} WHERE id % 100 < {share}")
                for f in range(files):
                    update(conn, f"INSERT INTO {compacted} SELECT * FROM {deleted} "
                                 f"WHERE id >= {f * per_file} AND id < {(f + 1) * per_file}")
                for name, template in QUERIES.items():
                    times: dict[str, list[float]] = {deleted: [], compacted: []}
                    cpu: dict[str, list[float]] = {deleted: [], compacted: []}  # the server's, per query
                    answers = {t: timed(conn, template.format(t=t))[0] for t in times}  # warm-up
                    if answers[deleted] != answers[compacted]:
                        raise AssertionError(f"{name} at {share}%: {answers}")
                    for r in range(repeat):
                        for table in ((deleted, compacted) if r % 2 == 0 else (compacted, deleted)):
                            cpu_before = server_cpu(server)
                            times[table].append(timed(conn, template.format(t=table))[1])
                            cpu[table].append(server_cpu(server) - cpu_before)
                    med = {t: statistics.median(v) for t, v in times.items()}
                    med_cpu = {t: statistics.median(v) for t, v in cpu.items()}
                    key = f"{name} {share}%"
                    result["median_s"][key] = {"deletes": med[deleted], "compacted": med[compacted]}
                    result["ratios"][key] = med[deleted] / med[compacted]
                    result["server_cpu_median_s"][key] = {"deletes": med_cpu[deleted], "compacted": med_cpu[compacted]}
                    result["cpu_ratios"][key] = med_cpu[deleted] / max(med_cpu[compacted], 1e-9)
            conn.close()
        finally:
            server.stop()
    result["loadavg_after"] = list(os.getloadavg())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = args.rows // args.files * args.files
    runs = []
    for n in range(args.runs):
        run = one_run(rows, args.files, args.repeat)
        runs.append(run)
        print(f"run {n + 1}/{args.runs}: load average {run['loadavg_before'][0]:.2f} -> {run['loadavg_after'][0]:.2f}; "
              + ", ".join(f"{k} {v:.2f}x (cpu {run['cpu_ratios'][k]:.2f}x)" for k, v in run["ratios"].items()),
              flush=True)
    keys = list(runs[0]["ratios"])
    ratios = {k: statistics.median(r["ratios"][k] for r in runs) for k in keys}
    seconds = {k: {side: statistics.median(r["median_s"][k][side] for r in runs) for side in ("deletes", "compacted")}
               for k in keys}
    cpu_ratios = {k: statistics.median(r["cpu_ratios"][k] for r in runs) for k in keys}
    results = {"rows": rows, "files": args.files, "repeat": args.repeat, "runs": args.runs,
               "ratio_deletes_vs_compacted": ratios, "median_s": seconds, "target_at_1pct": "<= 1.3",
               "server_cpu_ratio_deletes_vs_compacted": cpu_ratios,
               "loadavg": [[r["loadavg_before"][0], r["loadavg_after"][0]] for r in runs],
               "cpus": os.cpu_count(), "per_run": runs}
    print(f"scan with deletes vs compacted, {rows:,} rows in {args.files} files, median of {args.repeat} "
          f"queries, median of {args.runs} runs")
    for k in keys:
        print(f"{k:<16} deletes {seconds[k]['deletes']:.3f}s  compacted {seconds[k]['compacted']:.3f}s  "
              f"ratio {ratios[k]:.2f}x  server CPU ratio {cpu_ratios[k]:.2f}x")
    save_run("delete_scan", results)


if __name__ == "__main__":
    main()
