"""SQL DELETE / UPDATE / MERGE of 1% of a table: icefloe merge-on-read and copy-on-write vs DuckDB.

A real ``icefloe serve`` holds a fresh warehouse with two tables of ``--rows`` rows each, both
loaded with ``--files`` INSERT ... SELECT statements (one data file each, ids in file order):
``bench.cow`` (the default, copy-on-write) and ``bench.mor`` (``write.delete.mode``,
``write.update.mode`` and ``write.merge.mode`` = merge-on-read: position delete files). The
same rows go into a native DuckDB table in this process (the baseline). Then, ``--repeat`` times each, on a fresh 1%
slice every time, the same statement runs on all three:

- ``delete clustered``: ``DELETE ... WHERE id BETWEEN a AND b`` (1% of ids: one or two files);
- ``update clustered``: ``UPDATE ... SET v = v + 1, s = 'updated' WHERE id BETWEEN a AND b``;
- ``delete scattered``: ``DELETE ... WHERE id % 100 = r`` (1% of the rows of every file);
- ``update scattered``: ``UPDATE ... SET v = v + 1 WHERE id % 100 = r`` (same, an UPDATE);
- ``merge clustered``: ``MERGE`` of 1% of the ids, half of them in the table (updated), half
  new (inserted); ``write.merge.mode`` as the table's other modes.

icefloe's time is the client's round trip (ADBC ``execute_update``: plan, scan, write,
fsync'd commit); DuckDB's is ``con.execute`` on its in-memory table (the baseline of the
ratios: no durability to pay for), and on a table in a DuckDB database file (``duckdb_file``:
each statement commits to DuckDB's write-ahead log, as informative second baseline). Per run: median times,
the ratios merge-on-read / DuckDB and copy-on-write / DuckDB, the server's CPU seconds per
statement (``/proc``: user + system of the server process), bytes written against the
table's size, and a full scan (``count(*), sum(v)``) of each table afterwards (merge-on-read
reads apply the delete files). ``--runs`` full runs (fresh server and tables each); the
report is the median over runs, with the load average before and after each run.

    python benchmarks/bench_sql_writes.py [--rows 10000000] [--files 20] [--repeat 3] [--runs 3]
    python benchmarks/bench_sql_writes.py --quick     # 1M rows, 10 files, one run
    python benchmarks/bench_sql_writes.py --tables mor  # merge-on-read only (copy-on-write's rewrites are slow)
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

import adbc_driver_flightsql.dbapi as fsql
import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

COLUMNS = "range AS id, CAST(range % 1000 AS INTEGER) AS k, range * 0.5 AS v, 'row-' || range AS s"


def execute_update(conn: Any, sql: str) -> tuple[int, float]:
    with conn.cursor() as cur:
        cur.adbc_statement.set_sql_query(sql)
        start = time.perf_counter()
        count = cur.adbc_statement.execute_update()
        return int(count), time.perf_counter() - start


def server_cpu(server: ServerProcess) -> float:
    """CPU seconds (user + system) the server process has used so far (Linux ``/proc``)."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def last_summary(conn: Any, table: str) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(f'SELECT summary FROM bench."{table}$snapshots" ORDER BY committed_at DESC LIMIT 1')
        return dict(cur.fetchone()[0])


def statements(kind: str, rows: int, rep: int) -> str:
    one_pct = max(1, rows // 100)
    if kind == "delete scattered":
        return f"DELETE FROM bench.t WHERE id % 100 = {rep}"
    if kind == "update scattered":
        return f"UPDATE bench.t SET v = v + 1 WHERE id % 100 = {50 + rep}"
    if kind == "merge clustered":
        # Half of the source matches the table's last ids (updated), half is new (inserted).
        # Values of the column's own scale: DuckDB's v is DECIMAL(., 1) and would round others.
        half = max(1, one_pct // 2)
        first = rows - (rep + 1) * half
        return (f"MERGE INTO bench.t AS tgt USING (SELECT range AS id, range * 1.5 AS v FROM range({first}, "
                f"{first + one_pct})) s ON tgt.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
                "WHEN NOT MATCHED THEN INSERT VALUES (s.id, 0, s.v, 'merged')")
    # Clustered slices step through the table so each repetition hits rows still present:
    # deletes in the first half of the ids, updates in the second.
    start = ((rep * 7 + 3) % 45 + (50 if kind.startswith("update") else 0)) * one_pct
    where = f"id BETWEEN {start} AND {start + one_pct - 1}"
    if kind == "delete clustered":
        return f"DELETE FROM bench.t WHERE {where}"
    return f"UPDATE bench.t SET v = v + 1, s = 'updated' WHERE {where}"


KINDS = ("delete clustered", "update clustered", "delete scattered", "update scattered", "merge clustered")
TABLES = ("mor", "cow")


def one_run(rows: int, files: int, repeat: int, tables: tuple[str, ...] = TABLES,
            server_log: Path | None = None) -> dict[str, Any]:
    per_file = rows // files
    duck = duckdb.connect()
    duck.execute(f"CREATE TABLE t AS SELECT {COLUMNS} FROM range({rows})")
    result: dict[str, Any] = {"loadavg_before": list(os.getloadavg()), "operations": {}}
    with tempfile.TemporaryDirectory() as tmp:
        duck_file = duckdb.connect(str(Path(tmp) / "baseline.duckdb"))
        duck_file.execute(f"CREATE TABLE t AS SELECT {COLUMNS} FROM range({rows})")
        duck_file.execute("CHECKPOINT")
        # Run from this checkout: ``python -m`` puts the working folder first on sys.path, so a
        # server started from another checkout's folder would run that checkout's code.
        server = ServerProcess(Path(tmp) / "warehouse", cwd=ROOT).start()
        try:
            conn = fsql.connect(server.location, autocommit=True)
            execute_update(conn, "CREATE SCHEMA bench")
            for table in tables:
                execute_update(conn, f"CREATE TABLE bench.{table} (id BIGINT NOT NULL, k INTEGER, v DOUBLE, s VARCHAR)")
                for f in range(files):
                    execute_update(conn, f"INSERT INTO bench.{table} SELECT {COLUMNS} FROM range({f * per_file}, "
                                         f"{(f + 1) * per_file})")
            execute_update(conn, "ALTER TABLE bench.mor SET ('write.delete.mode' = 'merge-on-read', "
                                 "'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read')")
            result["table_bytes"] = int(last_summary(conn, tables[0])["total-files-size"])
            for table in tables:  # warm every side alike (file footers, DuckDB's buffers)
                _scan(conn, table)
            duck.execute("SELECT count(*), sum(v) FROM t").fetchall()
            duck_file.execute("SELECT count(*), sum(v) FROM t").fetchall()
            for kind in KINDS:
                times: dict[str, list[float]] = {"mor": [], "cow": [], "duckdb": [], "duckdb_file": []}
                cpu: dict[str, list[float]] = {"mor": [], "cow": []}  # the server's CPU per statement
                written: dict[str, list[float]] = {"mor": [], "cow": []}
                counts = []
                for rep in range(repeat):
                    sql = statements(kind, rows, rep)
                    start = time.perf_counter()
                    changed = duck.execute(sql.replace("bench.t", "t")).fetchone()
                    times["duckdb"].append(time.perf_counter() - start)
                    duck_count = changed[0] if changed else None
                    start = time.perf_counter()
                    duck_file.execute(sql.replace("bench.t", "t")).fetchone()
                    times["duckdb_file"].append(time.perf_counter() - start)
                    for table in tables:
                        size_before = int(last_summary(conn, table)["total-files-size"])
                        cpu_before = server_cpu(server)
                        count, seconds = execute_update(conn, sql.replace("bench.t", f"bench.{table}"))
                        cpu[table].append(server_cpu(server) - cpu_before)
                        if count != duck_count:
                            raise AssertionError(f"{kind} ({table}): icefloe changed {count} rows, DuckDB {duck_count}")
                        summary = last_summary(conn, table)
                        times[table].append(seconds)
                        written[table].append(int(summary.get("added-files-size", 0)) / size_before)
                    counts.append(duck_count)
                nan = float("nan")  # a table this run left out
                med = {k: statistics.median(v) if v else nan for k, v in times.items()}
                result["operations"][kind] = {
                    "rows_changed": counts,
                    "mor_median_s": med["mor"], "cow_median_s": med["cow"], "duckdb_median_s": med["duckdb"],
                    "duckdb_file_median_s": med["duckdb_file"],
                    "mor_vs_duckdb": med["mor"] / med["duckdb"], "cow_vs_duckdb": med["cow"] / med["duckdb"],
                    "mor_vs_duckdb_file": med["mor"] / med["duckdb_file"],
                    "cow_vs_mor": med["cow"] / med["mor"],
                    "mor_server_cpu_median_s": statistics.median(cpu["mor"]) if cpu["mor"] else nan,
                    "cow_server_cpu_median_s": statistics.median(cpu["cow"]) if cpu["cow"] else nan,
                    # Bytes of new files (data and delete files) as a fraction of the table's size.
                    "mor_bytes_written_vs_table": statistics.median(written["mor"]) if written["mor"] else nan,
                    "cow_bytes_written_vs_table": statistics.median(written["cow"]) if written["cow"] else nan,
                }
            duck_check = duck.execute("SELECT count(*), sum(v) FROM t").fetchone()
            if duck_file.execute("SELECT count(*), sum(v) FROM t").fetchone() != duck_check:
                raise AssertionError("DuckDB's file table differs from its in-memory one")
            duck_file.close()
            for table in tables:
                check, seconds = _scan(conn, table)
                if check != duck_check:
                    raise AssertionError(f"bench.{table} differs after the run: {check}, DuckDB {duck_check}")
                result[f"{table}_scan_after_s"] = seconds
            for table in set(TABLES) - set(tables):
                result[f"{table}_scan_after_s"] = float("nan")
            conn.close()
        finally:
            server.stop()
            if server_log is not None:  # the phase lines of icefloe.sqlwrite.mor (at debug level)
                with server_log.open("a") as out:
                    out.writelines(line for line in server.log_lines if "icefloe.sqlwrite" in line)
    result["loadavg_after"] = list(os.getloadavg())
    return result


def _scan(conn: Any, table: str) -> tuple[Any, float]:
    """A full scan's answer and its median time over three."""
    times = []
    for _ in range(3):
        with conn.cursor() as cur:
            start = time.perf_counter()
            cur.execute(f"SELECT count(*), sum(v) FROM bench.{table}")
            answer = cur.fetchone()
            times.append(time.perf_counter() - start)
    return answer, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="full runs (fresh server and tables); median reported")
    parser.add_argument("--quick", action="store_true", help="1M rows in 10 files, one run")
    parser.add_argument("--tables", choices=("both", "mor", "cow"), default="both",
                        help="which icefloe tables to measure (default both)")
    parser.add_argument("--out", type=Path, default=None, help="write the result here instead of a run file")
    parser.add_argument("--server-log", type=Path, default=None,
                        help="append the server's icefloe.sqlwrite log lines here (run with ICEFLOE_LOG_LEVEL=debug "
                             "for the merge-on-read phase times)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.files, args.runs = 1_000_000, 10, 1
    rows = args.rows // args.files * args.files
    runs = []
    for n in range(args.runs):
        run = one_run(rows, args.files, args.repeat, TABLES if args.tables == "both" else (args.tables,),
                      args.server_log)
        runs.append(run)
        print(f"run {n + 1}/{args.runs}: load average {run['loadavg_before'][0]:.2f} -> {run['loadavg_after'][0]:.2f}",
              flush=True)
    keys = ("mor_median_s", "cow_median_s", "duckdb_median_s", "duckdb_file_median_s", "mor_vs_duckdb",
            "mor_vs_duckdb_file", "cow_vs_duckdb", "cow_vs_mor",
            "mor_bytes_written_vs_table", "cow_bytes_written_vs_table", "mor_server_cpu_median_s",
            "cow_server_cpu_median_s")
    summary = {kind: {k: statistics.median(r["operations"][kind][k] for r in runs) for k in keys} for kind in KINDS}
    for kind in KINDS:
        summary[kind]["rows_changed"] = runs[0]["operations"][kind]["rows_changed"][0]
    scans = {f"{t}_scan_after_s": statistics.median(r[f"{t}_scan_after_s"] for r in runs) for t in TABLES}
    results = {"rows": rows, "files": args.files, "repeat": args.repeat, "runs": args.runs, "tables": args.tables,
               "table_bytes": runs[0]["table_bytes"], "median_over_runs": summary, "scan_after": scans,
               "loadavg": [[r["loadavg_before"][0], r["loadavg_after"][0]] for r in runs],
               "cpus": os.cpu_count(), "per_run": runs}
    print(f"SQL writes on {rows:,} rows in {args.files} files ({results['table_bytes'] / 1e6:.1f} MB per table), "
          f"median of {args.repeat} statements, median of {args.runs} runs")
    print(f"{'operation':<18} {'rows':>8} {'MoR s':>8} {'CoW s':>8} {'DuckDB s':>9} {'MoR/duck':>9} {'CoW/duck':>9} "
          f"{'CoW/MoR':>8} {'MoR bytes':>10} {'CoW bytes':>10} {'MoR cpu s':>10} {'duckfile s':>10} {'MoR/file':>9}")
    for kind, r in summary.items():
        print(f"{kind:<18} {r['rows_changed']:>8,} {r['mor_median_s']:>8.3f} {r['cow_median_s']:>8.3f} "
              f"{r['duckdb_median_s']:>9.4f} {r['mor_vs_duckdb']:>8.1f}x {r['cow_vs_duckdb']:>8.1f}x "
              f"{r['cow_vs_mor']:>7.1f}x {r['mor_bytes_written_vs_table']:>10.2%} "
              f"{r['cow_bytes_written_vs_table']:>10.2%} {r['mor_server_cpu_median_s']:>10.3f} "
              f"{r['duckdb_file_median_s']:>10.4f} {r['mor_vs_duckdb_file']:>8.1f}x")
    print(f"full scan after: merge-on-read {scans['mor_scan_after_s']:.3f}s, "
          f"copy-on-write {scans['cow_scan_after_s']:.3f}s; "
          f"load averages (1 min, before -> after each run): {results['loadavg']}")
    if args.out is None:
        save_run("sql_writes", results)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
