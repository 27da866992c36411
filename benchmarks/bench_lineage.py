"""Small-append rate with OpenLineage export on (collector up) vs off, in the same run.

A real HTTP collector runs in its own process (as a real one would); an in-process icefloe
server's catalog takes small pyiceberg appends. Two servers run side by side, one with export off
(``OPENLINEAGE_DISABLED=true``), one with export on (``OPENLINEAGE_URL`` = the collector), and
bursts of appends alternate between them, so machine noise hits both alike. Reported:
appends/s medians, the on/off ratio (target >= 0.95), server-process CPU per append (the
sender child's is not counted: running it apart is the point) and whether every event reached
the collector.

Usage: python benchmarks/bench_lineage.py [--appends N] [--bursts B]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flight_server.config import Config  # noqa: E402
from flight_server.server import IcefloeServer  # noqa: E402

COLLECTOR = r"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
count = 0
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        global count
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            count += 1
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        body = json.dumps({"count": count}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def collector_count(url: str) -> int:
    with urllib.request.urlopen(url + "/count", timeout=5) as resp:
        return int(json.loads(resp.read())["count"])


def start_server(warehouse: str, export: bool, url: str) -> IcefloeServer:
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    if export:
        os.environ["OPENLINEAGE_URL"] = url
    else:
        os.environ["OPENLINEAGE_DISABLED"] = "true"
    server = IcefloeServer(Config(warehouse=warehouse, port=0, lineage_namespace="bench"))
    assert server.lineage.enabled == export
    return server


def wait_drained(server: IcefloeServer, url: str, expected: int, timeout: float = 60.0) -> float:
    """Seconds until the collector holds ``expected`` events (and the outbox is empty)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if collector_count(url) >= expected and server.lineage.pending() == 0:
            break
        time.sleep(0.01)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=30, help="appends per burst")
    parser.add_argument("--bursts", type=int, default=12, help="bursts per case")
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True)
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu_ms: dict[bool, list[float]] = {False: [], True: []}
    drains: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as tmp:
        servers: dict[bool, IcefloeServer] = {}
        try:
            assert proc.stdout is not None
            url = f"http://127.0.0.1:{proc.stdout.readline().strip()}"
            # Both servers live side by side; bursts alternate between them so that machine
            # noise hits both alike. Before each burst the exporting server has drained
            # everything, so the other case never pays for it.
            servers[False] = start_server(os.path.join(tmp, "off"), False, url)
            servers[True] = start_server(os.path.join(tmp, "on"), True, url)
            batch = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)
            tables = {}
            for export, server in servers.items():
                server.catalog.create_namespace("ns")
                tables[export] = server.catalog.create_table("ns.t", SCHEMA)
                for _ in range(5):
                    tables[export].append(batch)  # warm-up
            wait_drained(servers[True], url, 2 * 6)
            for i in range(args.bursts):
                for export in (False, True) if i % 2 == 0 else (True, False):
                    table = tables[export]
                    cpu0, t0 = time.process_time(), time.perf_counter()
                    for _ in range(args.appends):
                        table.append(batch)
                    elapsed = time.perf_counter() - t0
                    cpu = time.process_time() - cpu0
                    rates[export].append(args.appends / elapsed)
                    cpu_ms[export].append(cpu / args.appends * 1000)
                    if export:
                        drains.append(wait_drained(servers[True], url, servers[True].catalog.log.head() * 2))
            delivered = collector_count(url)
            expected = servers[True].catalog.log.head() * 2
        finally:
            for server in servers.values():
                server.shutdown_and_close()
            proc.terminate()
            proc.wait()
    off_median, on_median = statistics.median(rates[False]), statistics.median(rates[True])
    ratio = on_median / off_median
    cpu_off, cpu_on = statistics.median(cpu_ms[False]), statistics.median(cpu_ms[True])
    print(f"small appends: {args.bursts} bursts of {args.appends} per case, alternating between two live servers")
    print(f"{'case':<28}{'median appends/s':>18}{'min':>9}{'max':>9}{'server CPU ms/append':>22}")
    for label, export in (("lineage off (DISABLED)", False), ("lineage on (collector up)", True)):
        r = rates[export]
        print(
            f"{label:<28}{statistics.median(r):>18.1f}{min(r):>9.1f}{max(r):>9.1f}{statistics.median(cpu_ms[export]):>22.2f}"
        )
    print(f"ratio on/off (appends/s): {ratio:.3f} (target >= 0.95)")
    print(f"events delivered: {delivered}/{expected}; median drain after a burst: {statistics.median(drains):.3f}s")
    results = {
        "appends_per_burst": args.appends,
        "bursts": args.bursts,
        "off_appends_per_s": rates[False],
        "on_appends_per_s": rates[True],
        "off_median": off_median,
        "on_median": on_median,
        "ratio": ratio,
        "target": 0.95,
        "off_cpu_ms_per_append": cpu_off,
        "on_cpu_ms_per_append": cpu_on,
        "events_delivered": delivered,
        "events_expected": expected,
        "drain_seconds": drains,
    }
    out = ROOT / "benchmarks" / "results" / "lineage.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
