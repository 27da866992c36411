"""Small-append rate with OpenLineage export on (collector up) vs off, in the same run.

A real HTTP collector runs in its own process (as a real one would); an in-process icefloe
server's catalog takes small pyiceberg appends. Rounds alternate between export off
(``OPENLINEAGE_DISABLED=true``) and on (``OPENLINEAGE_URL`` = the collector) over fresh
warehouses, so machine noise hits both alike. Reported: appends/s medians, the on/off ratio
(target >= 0.95) and whether every event reached the collector.

Usage: python benchmarks/bench_lineage.py [--appends N] [--rounds R]
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


def run_round(export: bool, url: str, appends: int) -> tuple[float, float, int]:
    """(appends per second, seconds until every event was delivered after the last append, events)."""
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    if export:
        os.environ["OPENLINEAGE_URL"] = url
    else:
        os.environ["OPENLINEAGE_DISABLED"] = "true"
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as wh:
        server = IcefloeServer(Config(warehouse=wh, port=0, lineage_namespace="bench"))
        try:
            cat = server.catalog
            cat.create_namespace("ns")
            table = cat.create_table("ns.t", SCHEMA)
            batch = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)
            table.append(batch)  # warm-up
            before = collector_count(url)
            start = time.perf_counter()
            for _ in range(appends):
                table.append(batch)
            elapsed = time.perf_counter() - start
            drained = time.perf_counter()
            while export and collector_count(url) - before < 2 * appends and time.perf_counter() - drained < 60:
                time.sleep(0.02)
            lag = time.perf_counter() - drained
            delivered = collector_count(url) - before
        finally:
            server.shutdown_and_close()
    return appends / elapsed, lag, delivered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = f"http://127.0.0.1:{proc.stdout.readline().strip()}"
        off: list[float] = []
        on: list[float] = []
        lags: list[float] = []
        delivered_ok = True
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for export in order:
                rate, lag, delivered = run_round(export, url, args.appends)
                if export:
                    on.append(rate)
                    lags.append(lag)
                    delivered_ok &= delivered >= 2 * args.appends
                else:
                    off.append(rate)
    finally:
        proc.terminate()
        proc.wait()
    off_median = statistics.median(off)
    on_median = statistics.median(on)
    ratio = on_median / off_median
    print(f"small appends ({args.appends} per round, {args.rounds} rounds each, alternating)")
    print(f"{'case':<28}{'median appends/s':>18}{'min':>10}{'max':>10}")
    print(f"{'lineage off (DISABLED)':<28}{off_median:>18.1f}{min(off):>10.1f}{max(off):>10.1f}")
    print(f"{'lineage on (collector up)':<28}{on_median:>18.1f}{min(on):>10.1f}{max(on):>10.1f}")
    print(f"ratio on/off: {ratio:.3f} (target >= 0.95)")
    print(f"all events delivered: {delivered_ok}; median drain after last append: {statistics.median(lags):.3f}s")
    results = {
        "appends_per_round": args.appends,
        "rounds": args.rounds,
        "off_appends_per_s": off,
        "on_appends_per_s": on,
        "off_median": off_median,
        "on_median": on_median,
        "ratio": ratio,
        "target": 0.95,
        "all_events_delivered": delivered_ok,
        "drain_seconds": lags,
    }
    out = ROOT / "benchmarks" / "results" / "lineage.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
