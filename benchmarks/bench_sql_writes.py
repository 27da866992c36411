"""SQL DELETE / UPDATE of 1% of a table: icefloe (Flight SQL, Iceberg copy-on-write) vs DuckDB.

A real ``icefloe serve`` holds a fresh warehouse; one table of ``--rows`` rows is loaded with
``--files`` INSERT ... SELECT statements (one data file each, ids in file order). The same
rows go into a native DuckDB table in this process (the baseline). Then, ``--repeat`` times
each, on a fresh 1% slice every time:

- ``delete clustered``: ``DELETE ... WHERE id BETWEEN a AND b`` (1% of ids: one or two files);
- ``update clustered``: ``UPDATE ... SET v = v + 1, s = 'updated' WHERE id BETWEEN a AND b``;
- ``delete scattered``: ``DELETE ... WHERE id % 100 = r`` (1% of the rows of every file).

icefloe's time is the client's round trip (ADBC ``execute_update``: plan, scan, rewrite,
fsync'd commit); DuckDB's is ``con.execute`` on its in-memory table. Reported: median times,
the ratio icefloe / DuckDB, and bytes rewritten (the snapshot summary's added + removed data
file sizes) against the table's size. Copy-on-write at file granularity means a clustered 1%
rewrites about one file, a scattered 1% rewrites the whole table.

    python benchmarks/bench_sql_writes.py [--rows 10000000] [--files 20] [--repeat 3]
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

import adbc_driver_flightsql.dbapi as fsql
import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from servers import ServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sql_writes.json"
COLUMNS = "range AS id, CAST(range % 1000 AS INTEGER) AS k, range * 0.5 AS v, 'row-' || range AS s"


def execute_update(conn: Any, sql: str) -> tuple[int, float]:
    with conn.cursor() as cur:
        cur.adbc_statement.set_sql_query(sql)
        start = time.perf_counter()
        count = cur.adbc_statement.execute_update()
        return int(count), time.perf_counter() - start


def last_summary(conn: Any) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute('SELECT summary FROM bench."t$snapshots" ORDER BY committed_at DESC LIMIT 1')
        return dict(cur.fetchone()[0])


def statements(kind: str, rows: int, rep: int) -> str:
    one_pct = max(1, rows // 100)
    if kind == "delete scattered":
        return f"DELETE FROM bench.t WHERE id % 100 = {rep}"
    # Clustered slices step through the table so each repetition hits rows still present:
    # deletes in the first half of the ids, updates in the second.
    start = ((rep * 7 + 3) % 45 + (50 if kind.startswith("update") else 0)) * one_pct
    where = f"id BETWEEN {start} AND {start + one_pct - 1}"
    if kind == "delete clustered":
        return f"DELETE FROM bench.t WHERE {where}"
    return f"UPDATE bench.t SET v = v + 1, s = 'updated' WHERE {where}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows, files = args.rows, args.files
    per_file = rows // files
    rows = per_file * files

    duck = duckdb.connect()
    duck.execute(f"CREATE TABLE t AS SELECT {COLUMNS} FROM range({rows})")

    results: dict[str, Any] = {"rows": rows, "files": files, "repeat": args.repeat, "operations": {}}
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "warehouse").start()
        try:
            conn = fsql.connect(server.location, autocommit=True)
            execute_update(conn, "CREATE SCHEMA bench")
            execute_update(conn, "CREATE TABLE bench.t (id BIGINT NOT NULL, k INTEGER, v DOUBLE, s VARCHAR)")
            load_start = time.perf_counter()
            for f in range(files):
                execute_update(conn, f"INSERT INTO bench.t SELECT {COLUMNS} FROM range({f * per_file}, "
                                     f"{(f + 1) * per_file})")
            results["load_s"] = time.perf_counter() - load_start
            results["table_bytes"] = int(last_summary(conn)["total-files-size"])
            with conn.cursor() as cur:  # warm both sides alike (file footers, DuckDB's buffers)
                cur.execute("SELECT count(*), sum(v) FROM bench.t")
                cur.fetchall()
            duck.execute("SELECT count(*), sum(v) FROM t").fetchall()
            for kind in ("delete clustered", "update clustered", "delete scattered"):
                ours, theirs, written, removed, counts = [], [], [], [], []
                for rep in range(args.repeat):
                    sql = statements(kind, rows, rep)
                    size_before = int(last_summary(conn)["total-files-size"])
                    count, seconds = execute_update(conn, sql)
                    summary = last_summary(conn)
                    start = time.perf_counter()
                    changed = duck.execute(sql.replace("bench.t", "t")).fetchone()
                    theirs.append(time.perf_counter() - start)
                    duck_count = changed[0] if changed else None
                    if count != duck_count:
                        raise AssertionError(f"{kind}: icefloe changed {count} rows, DuckDB {duck_count}")
                    ours.append(seconds)
                    counts.append(count)
                    # Fractions of the table's size just before the statement.
                    written.append(int(summary.get("added-files-size", 0)) / size_before)
                    removed.append(int(summary.get("removed-files-size", 0)) / size_before)
                ours_med, theirs_med = statistics.median(ours), statistics.median(theirs)
                results["operations"][kind] = {
                    "rows_changed": counts,
                    "icefloe_median_s": ours_med,
                    "duckdb_median_s": theirs_med,
                    "ratio": ours_med / theirs_med if theirs_med else None,
                    # New data file bytes written, and bytes of the data files the commit replaced,
                    # each as a fraction of the table's size right before the statement.
                    "bytes_written_vs_table": statistics.median(written),
                    "bytes_replaced_vs_table": statistics.median(removed),
                }
            with conn.cursor() as cur:
                cur.execute("SELECT count(*), sum(v) FROM bench.t")
                ours_check = cur.fetchone()
            duck_check = duck.execute("SELECT count(*), sum(v) FROM t").fetchone()
            if ours_check != duck_check:
                raise AssertionError(f"tables differ after the run: icefloe {ours_check}, DuckDB {duck_check}")
            conn.close()
        finally:
            server.stop()

    print(f"SQL writes on {rows:,} rows in {files} files ({results['table_bytes'] / 1e6:.1f} MB), "
          f"median of {args.repeat}; load took {results['load_s']:.1f}s")
    print(f"{'operation':<18} {'rows':>9} {'icefloe s':>10} {'duckdb s':>10} {'ratio':>8} "
          f"{'bytes written':>14} {'bytes replaced':>15}  (of the table's bytes)")
    for kind, r in results["operations"].items():
        print(f"{kind:<18} {r['rows_changed'][0]:>9,} {r['icefloe_median_s']:>10.3f} {r['duckdb_median_s']:>10.4f} "
              f"{r['ratio']:>7.1f}x {r['bytes_written_vs_table']:>14.1%} {r['bytes_replaced_vs_table']:>15.1%}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
