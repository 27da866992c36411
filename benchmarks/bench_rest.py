"""The REST catalog: pyiceberg appends through ``RestCatalog`` -> icefloe vs pyiceberg's
``SqlCatalog`` on SQLite, and a Spark ``INSERT`` through the REST catalog vs a DoPut of the
same rows. Each part runs three times in this run; the table shows every run and the medians,
with the load average.

- appends: ``--n`` sequential appends of the same ``--rows``-row table, each a fresh
  warehouse and table; commits/s per catalog and the ratio icefloe-REST / SqlCatalog.
- views: ``--view-rows`` rows in a table and an Iceberg view over it (created over REST, as an
  engine would); the same aggregate query on the view and on the view's own SQL inlined on the
  base table, ``--view-queries`` of each, interleaved; the ratio of median latencies view /
  base (target <= 1.05x: a view costs its metadata lookup and expansion, nothing per row).
- bulk: ``--bulk-rows`` rows (id bigint, value double, name string) into a fresh table,
  Spark (local[2], Iceberg's Spark runtime, REST catalog) vs one DoPut stream; rows/s and
  the ratio Spark / DoPut. The Spark session is started once, outside the timing.

    python benchmarks/bench_rest.py [--n 200] [--rows 100] [--view-rows 2000000] [--view-queries 30]
                                    [--bulk-rows 10000000] [--no-spark] [--parts appends,views,bulk]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_records import save_run  # noqa: E402

from benchmarks.serve_process import ServeProcess  # noqa: E402

RUNS = 3
JAR = Path.home() / ".cache" / "icefloe" / "iceberg-spark" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def small_rows(rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(rows), pa.int64()), "name": [f"row-{i}" for i in range(rows)]})


def appends_per_s(catalog: Catalog, rows: pa.Table, n: int) -> float:
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.appends", rows.schema)
    start = time.perf_counter()
    for _ in range(n):
        table.append(rows)
    elapsed = time.perf_counter() - start
    count = catalog.load_table("bench.appends").scan().to_arrow().num_rows
    if count != n * rows.num_rows:
        raise AssertionError(f"expected {n * rows.num_rows} rows, scanned {count}")
    return n / elapsed


def bulk_rows(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    return pa.table({"id": ids, "value": pc.multiply(ids.cast(pa.float64()), 0.5),
                     "name": pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), "")})


def do_put_seconds(location: str, table: pa.Table) -> float:
    client = flight.FlightClient(location)
    try:
        start = time.perf_counter()
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("bench", "bulk"), table.schema)
        writer.write_table(table, max_chunksize=256 * 1024)
        writer.done_writing()
        reader.read()
        writer.close()
        return time.perf_counter() - start
    finally:
        client.close()


def spark_session(rest_url: str, warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]").appName("bench-rest")
        .config("spark.jars", str(JAR))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.ice.type", "rest")
        .config("spark.sql.catalog.ice.uri", rest_url)
        .config("spark.sql.catalog.ice.warehouse", warehouse)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def scan_count(location: str, table: str) -> int:
    from adbc_driver_flightsql import dbapi

    with dbapi.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def bench_appends(args: argparse.Namespace, results: dict[str, Any]) -> None:
    rows = small_rows(args.rows)
    runs = []
    for run in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="bench-rest-") as tmp:
            server = ServeProcess(Path(tmp) / "wh", extra_args=["--rest-port", "0"])
            try:
                rest = appends_per_s(RestCatalog("bench", uri=server.rest_url), rows, args.n)
            finally:
                server.stop()
        with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
            sql_catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/wh")
            sql = appends_per_s(sql_catalog, rows, args.n)
            sql_catalog.close()
        runs.append({"run": run + 1, "rest_per_s": round(rest, 2), "sql_per_s": round(sql, 2),
                     "ratio": round(rest / sql, 3), "load": load()})
        print(f"  appends run {run + 1}: REST {rest:.1f}/s, SqlCatalog {sql:.1f}/s, load {runs[-1]['load']}")
    results["appends"] = {
        "n": args.n, "rows_per_append": args.rows, "runs": runs,
        "median_rest_per_s": statistics.median(r["rest_per_s"] for r in runs),
        "median_sql_per_s": statistics.median(r["sql_per_s"] for r in runs),
        "median_ratio_rest_over_sql": statistics.median(r["ratio"] for r in runs),
    }


VIEW_SQL = "SELECT id, value, name FROM bench.base WHERE id % 3 <> 0"
VIEW_QUERY = "SELECT count(*), sum(value), max(name) FROM {source}"


def timed_query(cur: Any, sql: str) -> float:
    start = time.perf_counter()
    cur.execute(sql)
    cur.fetch_arrow_table()
    return time.perf_counter() - start


def bench_views(args: argparse.Namespace, results: dict[str, Any]) -> None:
    from adbc_driver_flightsql import dbapi
    from pyiceberg.view.metadata import ViewVersion

    data = bulk_rows(args.view_rows)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        server = ServeProcess(Path(tmp) / "wh", extra_args=["--rest-port", "0"])
        try:
            rest = RestCatalog("bench", uri=server.rest_url)
            rest.create_namespace("bench")
            rest.create_table("bench.base", data.schema)
            put_into(server.location, ("bench", "base"), data)
            rest.create_view("bench.v", rest.load_table("bench.base").schema(), ViewVersion(**{  # type: ignore[arg-type]
                "version-id": 1, "schema-id": 0, "timestamp-ms": int(time.time() * 1000), "summary": {},
                "representations": [{"type": "sql", "sql": VIEW_SQL, "dialect": "duckdb"}],
                "default-namespace": ["bench"]}))
            on_view = VIEW_QUERY.format(source="bench.v")
            on_base = VIEW_QUERY.format(source=f"({VIEW_SQL}) AS v")
            with dbapi.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
                cur.execute(on_view)
                via_view = cur.fetchall()
                cur.execute(on_base)
                assert cur.fetchall() == via_view, "the view and its SQL disagree"
                for run in range(RUNS):
                    view_s, base_s = [], []
                    for _ in range(args.view_queries):  # interleaved: both see the same noise
                        view_s.append(timed_query(cur, on_view))
                        base_s.append(timed_query(cur, on_base))
                    view_ms, base_ms = statistics.median(view_s) * 1000, statistics.median(base_s) * 1000
                    runs.append({"run": run + 1, "view_ms": round(view_ms, 2), "base_ms": round(base_ms, 2),
                                 "ratio_view_over_base": round(view_ms / base_ms, 3), "load": load()})
                    print(f"  views run {run + 1}: view {view_ms:.1f} ms, base {base_ms:.1f} ms, "
                          f"load {runs[-1]['load']}")
        finally:
            server.stop()
    results["views"] = {
        "rows": args.view_rows, "queries_per_run": args.view_queries, "runs": runs,
        "median_view_ms": statistics.median(r["view_ms"] for r in runs),
        "median_base_ms": statistics.median(r["base_ms"] for r in runs),
        "median_ratio_view_over_base": statistics.median(r["ratio_view_over_base"] for r in runs),
    }


def put_into(location: str, path: tuple[str, str], table: pa.Table) -> None:
    client = flight.FlightClient(location)
    try:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
        writer.write_table(table, max_chunksize=256 * 1024)
        writer.done_writing()
        reader.read()
        writer.close()
    finally:
        client.close()


def bench_bulk(args: argparse.Namespace, results: dict[str, Any]) -> None:
    data = bulk_rows(args.bulk_rows)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-bulk-") as tmp:
        warehouse = Path(tmp) / "wh"
        server = ServeProcess(warehouse, extra_args=["--rest-port", "0"])
        spark = spark_session(server.rest_url, str(warehouse))
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.sql("CREATE NAMESPACE ice.bench")
            for run in range(RUNS):
                spark.sql("CREATE TABLE ice.bench.sbulk (id bigint, value double, name string) USING iceberg")
                start = time.perf_counter()
                spark.sql("INSERT INTO ice.bench.sbulk SELECT id, id * 0.5, concat('row-', CAST(id AS string)) "
                          f"FROM range({args.bulk_rows})")
                spark_s = time.perf_counter() - start
                assert scan_count(server.location, "bench.sbulk") == args.bulk_rows
                spark.sql("DROP TABLE ice.bench.sbulk PURGE")
                from pyiceberg.catalog.rest import RestCatalog as Rest

                Rest("b", uri=server.rest_url).create_table("bench.bulk", data.schema)
                put_s = do_put_seconds(server.location, data)
                assert scan_count(server.location, "bench.bulk") == args.bulk_rows
                Rest("b", uri=server.rest_url).purge_table("bench.bulk")
                runs.append({"run": run + 1, "spark_s": round(spark_s, 2), "doput_s": round(put_s, 2),
                             "spark_rows_per_s": round(args.bulk_rows / spark_s), "doput_rows_per_s":
                             round(args.bulk_rows / put_s), "ratio_spark_over_doput": round(put_s / spark_s, 3),
                             "load": load()})
                print(f"  bulk run {run + 1}: Spark {spark_s:.1f} s, DoPut {put_s:.1f} s, load {runs[-1]['load']}")
        finally:
            spark.stop()
            server.stop()
    results["bulk"] = {
        "rows": args.bulk_rows, "runs": runs,
        "median_spark_s": statistics.median(r["spark_s"] for r in runs),
        "median_doput_s": statistics.median(r["doput_s"] for r in runs),
        "median_ratio_spark_over_doput": statistics.median(r["ratio_spark_over_doput"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="appends per catalog and run (default 200)")
    parser.add_argument("--rows", type=int, default=100, help="rows per append (default 100)")
    parser.add_argument("--bulk-rows", type=int, default=10_000_000, help="rows of the bulk part (default 10M)")
    parser.add_argument("--view-rows", type=int, default=2_000_000, help="rows under the view (default 2M)")
    parser.add_argument("--view-queries", type=int, default=30, help="queries of each kind per run (default 30)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark-vs-DoPut part")
    parser.add_argument("--parts", default="appends,views,bulk", help="parts to run (default all)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {"load_start": load()}
    if "appends" in parts:
        bench_appends(args, results)
    if "views" in parts:
        bench_views(args, results)
    spark_ready = not args.no_spark and shutil.which("java") is not None and JAR.exists()
    if spark_ready and "bulk" in parts:
        bench_bulk(args, results)
    elif not args.no_spark and "bulk" in parts:
        print("bulk part skipped: needs java and the Iceberg Spark runtime (scripts/fetch-iceberg-spark)")
    results["load_end"] = load()

    print(f"\n{'part':<34}{'icefloe':>14}{'baseline':>14}{'ratio':>8}   (median of {RUNS}; load "
          f"{results['load_start']} -> {results['load_end']})")
    if "appends" in results:
        a = results["appends"]
        print(f"{'pyiceberg appends/s: REST vs SQL':<34}{a['median_rest_per_s']:>14}{a['median_sql_per_s']:>14}"
              f"{a['median_ratio_rest_over_sql']:>7}x")
    if "views" in results:
        v = results["views"]
        print(f"{'query ms: view vs its SQL on base':<34}{v['median_view_ms']:>14}{v['median_base_ms']:>14}"
              f"{v['median_ratio_view_over_base']:>7}x  (target <= 1.05x)")
    if "bulk" in results:
        b = results["bulk"]
        print(f"{'bulk seconds: Spark-REST vs DoPut':<34}{b['median_spark_s']:>14}{b['median_doput_s']:>14}"
              f"{b['median_ratio_spark_over_doput']:>7}x  (DoPut time / Spark time)")
    save_run("rest", results)


if __name__ == "__main__":
    main()
