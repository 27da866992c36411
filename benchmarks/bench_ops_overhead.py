"""What the operations instrumentation costs: metrics + query log on vs off, same run.

Two servers over two copies of the same warehouse, alternating blocks of calls:
- *baseline*: ``ICEFLOE_INSTRUMENTATION=off`` (no metric recorded, no query-log line);
- *instrumented*: the default, with ``--metrics-port 0`` and ``/metrics`` scraped every second
  while the benchmark runs (a Prometheus scrapes every 15 s: this is pessimistic).

Measured: ``SELECT 1`` p50 (GetFlightInfo + DoGet, as bench_flightsql_scan) and the rate of
small sequential DoPut appends (``--rows`` rows each), as 1 / the median append time.
Target: both within 3% of the baseline.
Writes benchmarks/results/ops_overhead.json.

    python benchmarks/bench_ops_overhead.py [--pings 600] [--appends 200] [--rows 10]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_flightsql_scan import fetch  # noqa: E402
from servers import ServerProcess  # noqa: E402

from flight_server.flightsql import protocol  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ops_overhead.json"
METRICS_LINE = re.compile(r"icefloe metrics on (http://\S+)/metrics")
BLOCK = 20


def rows(n: int, start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": pa.array([f"row-{i}" for i in range(start, start + n)])})


def append(client: flight.FlightClient, data: pa.Table) -> None:
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("bench", "small"), data.schema)
    writer.write_table(data)
    writer.done_writing()
    assert reader.read() is not None
    writer.close()


def per_statement_us(repeat: int = 5000) -> dict[str, float]:
    """In-process CPU cost of what one SELECT 1 adds on its RPC thread (two RPC observations, the
    counted stream, the statement counter, the queued log line), median of ``repeat``; and the
    writer thread's cost per line (normalise, format, write to /dev/null), mean over all."""
    import logging

    from flight_server.metrics import Metrics
    from flight_server.querylog import QueryLog

    log = logging.getLogger("icefloe.querylog")
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - closed below
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    batch = pa.record_batch({"1": pa.array([1], pa.int32())})
    costs: dict[str, float] = {}
    try:
        for name, enabled in (("off", False), ("on", True)):
            metrics = Metrics(enabled=enabled)
            querylog = QueryLog(metrics, 1000.0, background=False)
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                metrics.observe_rpc("get_flight_info", "OK", 0.001)
                reader = pa.RecordBatchReader.from_batches(batch.schema, iter([batch]))
                for _b in querylog.streamed(reader, "SELECT 1", None, start):
                    pass
                metrics.observe_rpc("do_get", "OK", 0.001)
                samples.append((time.perf_counter() - start) * 1e6)
            costs[name] = statistics.median(samples)
            if enabled:
                start = time.perf_counter()
                querylog.flush()
                costs["writer_per_line"] = (time.perf_counter() - start) * 1e6 / repeat
    finally:
        log.removeHandler(handler)
        handler.stream.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pings", type=int, default=600)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10)
    args = parser.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="icefloe-bench-ops-") as tmp:
        servers = {
            "baseline": ServerProcess(Path(tmp) / "a", env={"ICEFLOE_INSTRUMENTATION": "off"}).start(),
            "instrumented": ServerProcess(Path(tmp) / "b", ["--metrics-port", "0"]).start(),
        }
        stop = threading.Event()
        scrapes = [0]
        try:
            found = METRICS_LINE.search(servers["instrumented"].log)
            assert found, servers["instrumented"].log
            metrics_url = found.group(1) + "/metrics"

            def scrape() -> None:
                while not stop.wait(1.0):
                    assert httpx.get(metrics_url, timeout=10).status_code == 200
                    scrapes[0] += 1

            threading.Thread(target=scrape, daemon=True).start()
            clients = {name: flight.FlightClient(s.location) for name, s in servers.items()}
            ping = protocol.CommandStatementQuery("SELECT 1").pack()
            create = protocol.CommandStatementUpdate("CREATE TABLE bench.small (id BIGINT, name VARCHAR)").pack()
            for client in clients.values():
                _update(client, protocol.CommandStatementUpdate("CREATE SCHEMA bench").pack())
                _update(client, create)
                for _ in range(20):  # warm-up: connections, caches, the DuckDB slot
                    fetch(client, ping)
                append(client, rows(args.rows, 0))

            latency: dict[str, list[float]] = {name: [] for name in servers}
            for b in range(max(1, args.pings // BLOCK)):
                for name in (["baseline", "instrumented"] if b % 2 == 0 else ["instrumented", "baseline"]):
                    for _ in range(BLOCK):
                        start = time.perf_counter()
                        fetch(clients[name], ping)
                        latency[name].append((time.perf_counter() - start) * 1e3)

            # Per-append times, alternating blocks of 5: the median resists the fsync stalls a
            # shared disk adds far better than a block's rate does.
            append_ms: dict[str, list[float]] = {name: [] for name in servers}
            for b in range(max(1, args.appends // 5)):
                for name in (["baseline", "instrumented"] if b % 2 == 0 else ["instrumented", "baseline"]):
                    for i in range(5):
                        start = time.perf_counter()
                        append(clients[name], rows(args.rows, (b * 5 + i + 1) * args.rows))
                        append_ms[name].append((time.perf_counter() - start) * 1e3)
            for client in clients.values():
                client.close()
        finally:
            stop.set()
            for server in servers.values():
                server.stop()

    p50 = {name: statistics.median(v) for name, v in latency.items()}
    cpu = per_statement_us()
    rate = {name: 1000.0 / statistics.median(v) for name, v in append_ms.items()}
    done = {name: len(v) for name, v in append_ms.items()}
    result: dict[str, Any] = {
        "select1_p50_ms": p50,
        "select1_ratio": p50["instrumented"] / p50["baseline"],
        "appends_per_s": rate,
        "append_rate_ratio": rate["instrumented"] / rate["baseline"],
        "pings_each": len(latency["baseline"]),
        "appends_each": done["baseline"],
        "rows_per_append": args.rows,
        "scrapes": scrapes[0],
        "per_statement_us": cpu,
        "per_statement_share_of_select1_p50": (cpu["on"] - cpu["off"]) / 1000 / p50["baseline"],
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}; /metrics scraped {scrapes[0]} times")
    print(f"{'':24} {'baseline':>12} {'instrumented':>13} {'ratio':>7} {'target':>8}")
    print(f"{'SELECT 1 p50':24} {p50['baseline']:10.3f}ms {p50['instrumented']:11.3f}ms "
          f"{result['select1_ratio']:7.3f} {'<= 1.03':>8}   ({len(latency['baseline'])} each)")
    print(f"{'small appends/s':24} {rate['baseline']:12.1f} {rate['instrumented']:13.1f} "
          f"{result['append_rate_ratio']:7.3f} {'>= 0.97':>8}   "
          f"(1 / median of {done['baseline']} x {args.rows} rows each)")
    print(f"{'per-statement CPU':24} {cpu['off']:10.1f}us {cpu['on']:11.1f}us "
          f"{result['per_statement_share_of_select1_p50']:7.3f} {'<= 0.03':>8}   "
          "(added on the RPC thread, share of the baseline SELECT 1 p50)")
    print(f"{'query-log writer':24} {'':>12} {cpu['writer_per_line']:11.1f}us per line (background thread)")


def _update(client: flight.FlightClient, command: bytes) -> None:
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), pa.schema([]))
    writer.done_writing()
    reader.read()
    writer.close()


if __name__ == "__main__":
    main()
