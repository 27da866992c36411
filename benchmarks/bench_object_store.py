"""The warehouse on object storage vs on local disk: the same server, rows and client.

Two icefloe servers run side by side, one over a local warehouse folder and one over an
``s3://`` warehouse on the real S3 server of the tests (s3s-fs on loopback, which stores its
objects on the same disk: the difference measured is the object-store path — HTTP requests,
signing, no page cache sharing — not a network). A third server, on its own prefix, talks to
the store through the tests' pass-through relay, which counts its requests (where the time
goes); the timed S3 server talks to the store directly, so the relay's cost is not timed.

Rows per round, medians of ``--rounds`` rounds (the storages alternate within each round):
- bulk append: one DoPut of ``--rows`` rows (S3 time / local time);
- scan: ``SELECT *`` of the table over Flight SQL, one stream (rows/s on S3 / rows/s local;
  target >= 0.7);
- split scan on S3: 4 endpoints read in parallel vs one stream (target >= 1.3);
- small appends: ``--appends`` sequential DoPuts of 100 rows each (ms per append; S3 / local),
  with the S3 requests one append makes;
- Spark count+sum on S3 (``local[2]``, Iceberg's runtime + AWS bundle): ``SELECT count(*),
  sum(id)`` of the S3 table through icefloe's REST catalog (storage settings vended by it) vs
  ``spark.read.parquet`` of the same objects over ``s3a://`` (hadoop-aws, fetched by
  ``scripts/fetch-hadoop-aws``), the two alternating; throughput ratio REST / plain Parquet
  (target >= 0.9). Skipped, saying why, without java; ``--no-spark`` skips it.

Usage: python benchmarks/bench_object_store.py [--rows 2000000] [--rounds 3] [--appends 30] [--no-spark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doput_client import do_put  # noqa: E402
from run_records import save_run  # noqa: E402
from s3_faults import FaultRelay  # noqa: E402
from s3_support import BUCKET, S3Server  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

from flight_server.flightsql import protocol as p  # noqa: E402

SPLIT_HEADERS = [(b"icefloe.scan.max-partitions", b"4"), (b"icefloe.scan.target-partition-bytes", b"1")]


def _rows(n: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": pa.compute.cast(pa.compute.multiply(ids, 7), pa.string()),
                     "x": pa.compute.divide(pa.compute.cast(ids, pa.float64()), 3.0)})


def _sql(location: str, statement: str) -> None:
    client = flight.FlightClient(location)
    try:
        descriptor = flight.FlightDescriptor.for_command(p.CommandStatementUpdate(query=statement).pack())
        writer, reader = client.do_put(descriptor, pa.schema([]))
        writer.done_writing()
        reader.read()
        writer.close()
    finally:
        client.close()


def _scan(location: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[float, int, int]:
    """Seconds to read every row of bench.events (endpoints in parallel), rows, endpoints."""
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(headers=headers or [])
        started = time.perf_counter()
        query = p.CommandStatementQuery(query="SELECT * FROM bench.events").pack()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(query), options)
        counts: list[int] = []

        def read(ticket: flight.Ticket) -> None:
            reader = client.do_get(ticket, options)
            counts.append(sum(chunk.data.num_rows for chunk in reader))

        threads = [threading.Thread(target=read, args=(e.ticket,)) for e in info.endpoints]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started, sum(counts), len(info.endpoints)
    finally:
        client.close()


def _spark_count_sum(rest_url: str, warehouse: str, store: S3Server, rounds: int,
                     expected: tuple[int, int]) -> dict[str, Any]:
    """Seconds of Spark's count+sum through the REST catalog and over the same files read as
    plain Parquet (s3a), alternating; both answers checked against ``expected``."""
    from tests.flight_server.web.rest_spark_support import aws_bundle_jar, runtime_jar, spark_session

    s3a_jars = subprocess.run(["bash", str(ROOT / "scripts" / "fetch-hadoop-aws")], check=True,
                              capture_output=True, text=True).stdout.strip().splitlines()[-1]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The REST side gets its storage settings from the catalog; only s3a (the baseline) is told.
    spark = spark_session(rest_url, warehouse, aws=True, **{
        "spark.jars": ",".join([str(runtime_jar()), str(aws_bundle_jar()), s3a_jars]),
        "spark.hadoop.fs.s3a.endpoint": store.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": store.access_key, "spark.hadoop.fs.s3a.secret.key": store.secret_key,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    })
    spark.sparkContext.setLogLevel("ERROR")
    try:
        files = [r[0] for r in spark.sql("SELECT file_path FROM ice.bench.events.files").collect()]
        objects = [f.replace("s3://", "s3a://", 1) for f in files]

        def rest() -> tuple[int, int]:
            row = spark.sql("SELECT count(*) AS n, sum(id) AS s FROM ice.bench.events").collect()[0]
            return int(row.n), int(row.s)

        def parquet() -> tuple[int, int]:
            row = spark.read.parquet(*objects).selectExpr("count(*) AS n", "sum(id) AS s").collect()[0]
            return int(row.n), int(row.s)

        timings: dict[str, list[float]] = {"rest": [], "parquet": []}
        for run in (rest, parquet):  # warm-up: the JVM's classes, both paths' first reads
            assert run() == expected, run.__name__
        for round_no in range(rounds):
            order = [("rest", rest), ("parquet", parquet)]
            for name, run in order if round_no % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                assert run() == expected, name
                timings[name].append(time.perf_counter() - started)
        return {"files": len(files), "seconds": timings}
    finally:
        spark.stop()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--appends", type=int, default=30)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark count+sum row")
    args = parser.parse_args()
    spark_skip = "--no-spark" if args.no_spark else None if shutil.which("java") else "no java on PATH"

    work = Path(tempfile.mkdtemp(prefix="bench-object-store-"))
    store = S3Server(work / "s3").start()
    relay = FaultRelay(store.port).start()
    local = ServeProcess(work / "local")
    # The S3 server's settings, for the S3 servers only (the local one refuses --s3-* flags).
    # The timed one talks to the store directly; a third, through the counting relay, only
    # counts requests (the relay, in Python, would add its own cost to the timings).
    os.environ.update(store.env())
    remote = ServeProcess(work / "unused", extra_args=["--warehouse", f"s3://{BUCKET}/bench", "--catalog-path",
                                                       str(work / "catalog"), "--rest-port", "0"])
    os.environ["ICEFLOE_S3_ENDPOINT"] = relay.endpoint
    counted = ServeProcess(work / "unused", extra_args=["--warehouse", f"s3://{BUCKET}/counted", "--catalog-path",
                                                        str(work / "catalog-counted")])
    servers = {"local": local, "s3": remote}
    timings: dict[str, list[float]] = {k: [] for k in ("append_local", "append_s3", "scan_local", "scan_s3",
                                                       "split_s3", "small_local", "small_s3")}
    # icefloe's CPU seconds per scan: a scan that is CPU-bound already (decoding) cannot be sped
    # up by more endpoints on a machine whose cores are busy.
    server_cpu: dict[str, list[float]] = {k: [] for k in ("scan_local", "scan_s3", "split_s3")}
    requests_per_append: Counter[str] = Counter()
    scan_requests: Counter[str] = Counter()
    endpoints = 0
    spark: dict[str, Any] | None = None
    try:
        data = _rows(args.rows)
        for server in servers.values():
            _sql(server.location, "CREATE SCHEMA bench")
            _sql(server.location, "CREATE TABLE bench.events (id BIGINT, v VARCHAR, x DOUBLE)")
            _sql(server.location, "CREATE TABLE bench.small (id BIGINT, v VARCHAR, x DOUBLE)")
        for server in servers.values():  # warm-up: both pay their first reads before timing
            do_put(server.location, ("bench", "events"), data, batch_rows=65_536)
        for round_no in range(args.rounds):
            order = ["local", "s3"] if round_no % 2 == 0 else ["s3", "local"]
            for name in order:
                location = servers[name].location
                if round_no == 0:  # the scanned table: written twice, the second write timed
                    started = time.perf_counter()
                    do_put(location, ("bench", "events"), data, batch_rows=65_536)
                    timings[f"append_{name}"].append(time.perf_counter() - started)
                    _scan(location)  # warm-up
                cpu_before = _cpu_seconds(servers[name].proc.pid)
                seconds, rows, _ = _scan(location)
                server_cpu[f"scan_{name}"].append(_cpu_seconds(servers[name].proc.pid) - cpu_before)
                assert rows == 2 * args.rows, (name, rows)
                timings[f"scan_{name}"].append(seconds)
                if name == "s3":
                    cpu_before = _cpu_seconds(servers[name].proc.pid)
                    seconds, rows, endpoints = _scan(location, SPLIT_HEADERS)
                    server_cpu["split_s3"].append(_cpu_seconds(servers[name].proc.pid) - cpu_before)
                    assert rows == 2 * args.rows
                    timings["split_s3"].append(seconds)
                started = time.perf_counter()
                for k in range(args.appends):
                    do_put(location, ("bench", "small"), _rows(100, start=k * 100))
                timings[f"small_{name}"].append((time.perf_counter() - started) / args.appends)
        if spark_skip is None:
            # ids 0 .. rows-1, written twice
            spark = _spark_count_sum(remote.rest_url, f"s3://{BUCKET}/bench", store, args.rounds,
                                     (2 * args.rows, args.rows * (args.rows - 1)))
        # Where the time goes: the S3 requests of one scan and of one small append.
        _sql(counted.location, "CREATE SCHEMA bench")
        _sql(counted.location, "CREATE TABLE bench.events (id BIGINT, v VARCHAR, x DOUBLE)")
        _sql(counted.location, "CREATE TABLE bench.small (id BIGINT, v VARCHAR, x DOUBLE)")
        for _ in range(2):
            do_put(counted.location, ("bench", "events"), data, batch_rows=65_536)
        _scan(counted.location)  # footers and manifests cached, as in the timed scans
        before = len(relay.log)
        _scan(counted.location)
        scan_requests.update(r.method for r in relay.log[before:])
        do_put(counted.location, ("bench", "small"), _rows(100))
        before = len(relay.log)
        for k in range(args.appends):
            do_put(counted.location, ("bench", "small"), _rows(100, start=k * 100))
        requests_per_append.update(r.method for r in relay.log[before:])
    finally:
        for server in (*servers.values(), counted):
            server.stop()
        relay.stop()
        store.stop()
        shutil.rmtree(work, ignore_errors=True)  # the tables: hundreds of MB at 10M rows

    load = os.getloadavg()
    med = {k: _median(v) for k, v in timings.items()}
    results: dict[str, Any] = {
        "rows": args.rows, "rounds": args.rounds, "appends": args.appends,
        "load_average": [round(x, 2) for x in load],
        "median_seconds": {k: round(v, 4) for k, v in med.items()},
        "bulk_append_s3_over_local": round(med["append_s3"] / med["append_local"], 3),
        "scan_s3_vs_local": round(med["scan_local"] / med["scan_s3"], 3),  # throughput ratio
        "split_vs_single_on_s3": round(med["scan_s3"] / med["split_s3"], 3),
        "split_endpoints": endpoints,
        "server_cpu_seconds_per_scan": {k: round(_median(v), 3) for k, v in server_cpu.items()},
        "small_append_ms": {"local": round(med["small_local"] * 1000, 1), "s3": round(med["small_s3"] * 1000, 1)},
        "small_append_s3_over_local": round(med["small_s3"] / med["small_local"], 3),
        "s3_requests_per_small_append": {k: round(v / args.appends, 1) for k, v in requests_per_append.items()},
        "s3_requests_per_scan": dict(scan_requests),
    }
    if spark is not None:
        rest_s, parquet_s = _median(spark["seconds"]["rest"]), _median(spark["seconds"]["parquet"])
        results["spark_count_sum"] = {"files": spark["files"], "rest_s": round(rest_s, 3),
                                      "parquet_s": round(parquet_s, 3),
                                      "seconds": {k: [round(x, 3) for x in v] for k, v in spark["seconds"].items()}}
        results["spark_rest_vs_parquet"] = round(parquet_s / rest_s, 3)  # throughput ratio
    else:
        results["spark_skipped"] = spark_skip
    print(f"object store vs local disk ({2 * args.rows:,} rows scanned, median of {args.rounds}; load {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f})")
    print(f"  bulk append        S3 time / local time        {results['bulk_append_s3_over_local']:.2f}x")
    print(f"  scan               S3 rows/s / local rows/s    {results['scan_s3_vs_local']:.2f}x   (target >= 0.7)")
    print(f"  split scan on S3   {endpoints} endpoints / one stream     "
          f"{results['split_vs_single_on_s3']:.2f}x   (target >= 1.3)")
    print(f"  icefloe CPU s per scan: {results['server_cpu_seconds_per_scan']} (wall: "
          f"{ {k: round(med[k], 3) for k in ('scan_local', 'scan_s3', 'split_s3')} })")
    print(f"  small append       {results['small_append_ms']['s3']:.1f} ms on S3 vs "
          f"{results['small_append_ms']['local']:.1f} ms local ({results['small_append_s3_over_local']:.2f}x); "
          f"S3 requests per append: {results['s3_requests_per_small_append']}")
    print(f"  S3 requests of one scan: {results['s3_requests_per_scan']}")
    if spark is not None:
        print(f"  Spark count+sum    REST catalog / spark.read.parquet (S3) {results['spark_rest_vs_parquet']:.2f}x   "
              f"(target >= 0.9; {results['spark_count_sum']['rest_s']:.2f} s vs "
              f"{results['spark_count_sum']['parquet_s']:.2f} s)")
    else:
        print(f"  Spark count+sum    skipped: {spark_skip}")
    # The scan is of 10M rows: runs at that size are figures of their own.
    save_run("object_store_10m" if 2 * args.rows >= 10_000_000 else "object_store", results)


if __name__ == "__main__":
    main()
