"""What the operations instrumentation costs: metrics + query log on vs off, A/B rounds.

The same server code twice, one with ``ICEFLOE_INSTRUMENTATION=off`` (*baseline*: no metric
recorded, no query-log line), one with the default instrumentation, ``--metrics-port 0`` and
``/metrics`` scraped every second (a Prometheus scrapes every 15 s: this is pessimistic).

A one-off pair of servers differs by more than the instrumentation costs (an A/A pair measured
0.83 on appends at load 10), so the figure is a median of per-round ratios: every round starts
a fresh pair over two warehouses, gives the instrumented role to the other warehouse than the
round before, and interleaves small blocks of calls to both. Measured per round: ``SELECT 1``
p50 (GetFlightInfo + DoGet, as bench_flightsql_scan) and the small-DoPut rate (1 / the median
append time, ``--rows`` rows each). ``--aa`` runs both servers uninstrumented: the noise floor
of the same method. Target: both ratios within 3%.
Writes a run file benchmarks/results/ops_overhead-<UTC time>.json (ops_overhead_aa-... with ``--aa``).

    python benchmarks/bench_ops_overhead.py [--rounds 10] [--pings 200] [--appends 40] [--rows 10] [--aa]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
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
from run_records import save_run  # noqa: E402
from servers import READY, ServerProcess  # noqa: E402

from flight_server.flightsql import protocol  # noqa: E402

METRICS_LINE = re.compile(r"icefloe metrics on (http://\S+)/metrics")
BLOCK = 20


class FileLogServer(ServerProcess):
    """A server whose stderr goes to a file, as a log would in production: the query log's line
    per statement must not be read by this benchmark's own process (``ServerProcess`` pumps
    stderr through a thread here, which competes with the measuring client for the GIL)."""

    def start(self, timeout: float = 60.0) -> FileLogServer:
        cmd = [sys.executable, "-m", "flight_server.cli", "serve", "--warehouse", str(self.warehouse),
               "--port", "0", *self.extra_args]
        self.warehouse.parent.mkdir(parents=True, exist_ok=True)
        log_path = self.warehouse.parent / f"{self.warehouse.name}.log"
        with open(log_path, "w") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, env=self.env, cwd=self.cwd)
        deadline = time.monotonic() + timeout
        while True:
            text = log_path.read_text()
            found = READY.search(text)
            if found and (METRICS_LINE.search(text) or "--metrics-port" not in self.extra_args):
                self.location = found.group(1)
                self.log_lines = [text]
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("icefloe server did not start:\n" + text)
            time.sleep(0.05)


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

    from flight_server.observability.metrics import Metrics
    from flight_server.observability.querylog import QueryLog

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


def _round(tmp: Path, r: int, args: argparse.Namespace, scrapes: list[int]) -> dict[str, Any]:
    """One round: a fresh pair of servers, interleaved blocks of pings, then of appends."""
    roles = ["baseline", "instrumented"] if r % 2 == 0 else ["instrumented", "baseline"]
    servers: dict[str, FileLogServer] = {}
    stop = threading.Event()
    scraper: threading.Thread | None = None
    try:
        for folder, role in zip(("a", "b"), roles, strict=True):
            on = role == "instrumented" and not args.aa
            servers[role] = FileLogServer(tmp / f"{folder}{r}", ["--metrics-port", "0"] if on else [],
                                          env={} if on else {"ICEFLOE_INSTRUMENTATION": "off"}).start()
        if not args.aa:
            found = METRICS_LINE.search(servers["instrumented"].log)
            assert found, servers["instrumented"].log
            metrics_url = found.group(1) + "/metrics"

            def scrape() -> None:
                while not stop.wait(1.0):
                    assert httpx.get(metrics_url, timeout=10).status_code == 200
                    scrapes[0] += 1

            scraper = threading.Thread(target=scrape, daemon=True)
            scraper.start()
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
        if scraper is not None:
            scraper.join(15)  # a scrape in flight ends before its server stops
        for server in servers.values():
            server.stop()
    p50 = {name: statistics.median(v) for name, v in latency.items()}
    rate = {name: 1000.0 / statistics.median(v) for name, v in append_ms.items()}
    return {"instrumented_warehouse": "a" if roles[0] == "instrumented" else "b", "select1_p50_ms": p50,
            "appends_per_s": rate, "select1_ratio": p50["instrumented"] / p50["baseline"],
            "append_rate_ratio": rate["instrumented"] / rate["baseline"]}


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pings", type=int, default=200, help="SELECT 1 calls per server per round")
    parser.add_argument("--appends", type=int, default=40, help="appends per server per round")
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--aa", action="store_true", help="both servers uninstrumented (the noise floor)")
    args = parser.parse_args()

    load_before = os.getloadavg()
    scrapes = [0]
    with tempfile.TemporaryDirectory(prefix="icefloe-bench-ops-") as tmp:
        rounds = [_round(Path(tmp), r, args, scrapes) for r in range(args.rounds)]
    cpu = per_statement_us()
    select1 = _quartiles([r["select1_ratio"] for r in rounds])
    appends = _quartiles([r["append_rate_ratio"] for r in rounds])
    base_p50 = statistics.median(r["select1_p50_ms"]["baseline"] for r in rounds)
    result: dict[str, Any] = {
        "mode": "A/A (both uninstrumented)" if args.aa else "A/B",
        "rounds": rounds,
        "select1_ratio": select1[1], "select1_ratio_quartiles": [select1[0], select1[2]],
        "append_rate_ratio": appends[1], "append_rate_ratio_quartiles": [appends[0], appends[2]],
        "select1_p50_ms_baseline": base_p50,
        "pings_per_round": args.pings, "appends_per_round": args.appends, "rows_per_append": args.rows,
        "scrapes": scrapes[0],
        "per_statement_us": cpu,
        "per_statement_share_of_select1_p50": (cpu["on"] - cpu["off"]) / 1000 / base_p50,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    save_run("ops_overhead_aa" if args.aa else "ops_overhead", result)
    print(f"{result['mode']}, {args.rounds} rounds; load average {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"/metrics scraped {scrapes[0]} times")
    print(f"{'median of round ratios':28} {'ratio':>7} {'quartiles':>15} {'target':>8}")
    print(f"{'SELECT 1 p50':28} {select1[1]:7.3f} {select1[0]:7.3f}-{select1[2]:<7.3f} {'<= 1.03':>8}   "
          f"(baseline p50 {base_p50:.3f} ms, {args.pings} pings each per round)")
    print(f"{'small appends/s':28} {appends[1]:7.3f} {appends[0]:7.3f}-{appends[2]:<7.3f} {'>= 0.97':>8}   "
          f"(1 / median of {args.appends} x {args.rows} rows each per round)")
    print(f"{'per-statement CPU':28} {result['per_statement_share_of_select1_p50']:7.3f} {'':15} {'<= 0.03':>8}   "
          f"({cpu['off']:.1f} -> {cpu['on']:.1f} us on the RPC thread, share of the baseline SELECT 1 p50)")
    print(f"{'query-log writer':28} {cpu['writer_per_line']:7.1f} us per line (background thread)")


def _update(client: flight.FlightClient, command: bytes) -> None:
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), pa.schema([]))
    writer.done_writing()
    reader.read()
    writer.close()


if __name__ == "__main__":
    main()
