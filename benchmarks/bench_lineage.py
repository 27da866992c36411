"""Small-append rate with OpenLineage export on (collector up) vs off, in the same run.

A real HTTP collector runs in its own process (as a real one would). ``--via doput`` (the
default): two real server processes take DoPut appends of 3 rows; ``--via catalog``: two
in-process servers' catalogs take pyiceberg appends. One side has export off
(``OPENLINEAGE_DISABLED=true``), the other on (``OPENLINEAGE_URL`` = the collector); bursts
of appends alternate between them, so machine noise hits both alike. Reported:
appends/s medians, the on/off ratio (target >= 0.95), server-process CPU per append (the
sender child's is not counted: running it apart is the point) and whether every event reached
the collector.

Usage: python benchmarks/bench_lineage.py [--via doput|catalog] [--appends N] [--bursts B]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_records import save_run  # noqa: E402

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


def wait_count(url: str, base: int, expected: int, timeout: float = 60.0) -> float:
    """Seconds until the collector holds ``expected`` events beyond ``base``."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout and collector_count(url) - base < expected:
        time.sleep(0.01)
    return time.perf_counter() - start


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Case:
    """One side of the comparison: something that appends and can say what it cost."""

    def __init__(self, export: bool) -> None:
        self.export = export
        self.lineage_cpu = (0.0, 0.0)  # (worker thread, sender child) CPU seconds, after close

    def append(self) -> None:
        raise NotImplementedError

    def cpu_s(self) -> float:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class InProcessCase(Case):
    """pyiceberg appends through an in-process server's catalog (CPU: this process)."""

    def __init__(self, export: bool, url: str, tmp: str) -> None:
        super().__init__(export)
        self.server = start_server(os.path.join(tmp, "on" if export else "off"), export, url)
        self.server.catalog.create_namespace("ns")
        self.table = self.server.catalog.create_table("ns.t", SCHEMA)
        self.batch = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)

    def append(self) -> None:
        self.table.append(self.batch)

    def cpu_s(self) -> float:
        return time.process_time()

    def close(self) -> None:
        self.server.shutdown_and_close()
        self.lineage_cpu = (self.server.lineage.worker_cpu_s, self.server.lineage.sender_cpu_s)


class DoPutCase(Case):
    """DoPut appends of 3 rows to a real server process (CPU: the server process)."""

    def __init__(self, export: bool, url: str, tmp: str) -> None:
        super().__init__(export)
        sys.path.insert(0, str(ROOT / "tests"))
        from servers import ServerProcess

        from catalog import RocksCatalog

        warehouse = Path(tmp) / ("doput-on" if export else "doput-off")
        cat = RocksCatalog("setup", warehouse=str(warehouse))
        cat.create_namespace("ns")
        cat.create_table("ns.t", SCHEMA)
        cat.close()
        env = {"OPENLINEAGE_URL": url} if export else {"OPENLINEAGE_DISABLED": "true"}
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
            del os.environ[key]
        self.proc = ServerProcess(warehouse, ["--lineage-namespace", "bench"], env=env)
        self.proc.start()
        self.client = flight.FlightClient(self.proc.location)
        self.batch = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)

    def append(self) -> None:
        writer, reader = self.client.do_put(flight.FlightDescriptor.for_path("ns", "t"), SCHEMA)
        writer.write_table(self.batch)
        writer.done_writing()
        reader.read()
        writer.close()

    def cpu_s(self) -> float:
        assert self.proc.proc is not None
        return proc_cpu_s(self.proc.proc.pid)

    def close(self) -> None:
        self.client.close()
        self.proc.stop()
        found = re.search(r"worker CPU ([0-9.]+)s, sender CPU ([0-9.]+)s", self.proc.log)
        if found:
            self.lineage_cpu = (float(found.group(1)), float(found.group(2)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--via",
        choices=("doput", "catalog"),
        default="doput",
        help="DoPut to server processes, or pyiceberg appends in-process",
    )
    parser.add_argument("--appends", type=int, default=30, help="appends per burst")
    parser.add_argument("--bursts", type=int, default=12, help="bursts per case")
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True)
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu_ms: dict[bool, list[float]] = {False: [], True: []}
    drains: list[float] = []
    made = 0
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as tmp:
        cases: dict[bool, Case] = {}
        try:
            assert proc.stdout is not None
            url = f"http://127.0.0.1:{proc.stdout.readline().strip()}"
            # Both cases live side by side; bursts alternate between them so that machine
            # noise hits both alike. Before each burst the exporting side has delivered
            # everything, so the other case never pays for it.
            kind = DoPutCase if args.via == "doput" else InProcessCase
            base = collector_count(url)
            cases[False] = kind(False, url, tmp)
            cases[True] = kind(True, url, tmp)
            for case in cases.values():
                for _ in range(5):
                    case.append()  # warm-up
            # the in-process case creates its table through the exporting server: one more run
            made = 5 + (1 if args.via == "catalog" else 0)
            wait_count(url, base, 2 * made)
            for i in range(args.bursts):
                for export in (False, True) if i % 2 == 0 else (True, False):
                    case = cases[export]
                    cpu0, t0 = case.cpu_s(), time.perf_counter()
                    for _ in range(args.appends):
                        case.append()
                    elapsed = time.perf_counter() - t0
                    cpu = case.cpu_s() - cpu0
                    rates[export].append(args.appends / elapsed)
                    cpu_ms[export].append(cpu / args.appends * 1000)
                    if export:
                        made += args.appends
                        drains.append(wait_count(url, base, 2 * made))
            delivered = collector_count(url) - base
            expected = 2 * made
        finally:
            for case in cases.values():
                case.close()
            proc.terminate()
            proc.wait()
    worker_cpu, sender_cpu = cases[True].lineage_cpu if True in cases else (0.0, 0.0)
    commits = max(made, 1)
    off_median, on_median = statistics.median(rates[False]), statistics.median(rates[True])
    ratio = on_median / off_median
    cpu_off, cpu_on = statistics.median(cpu_ms[False]), statistics.median(cpu_ms[True])
    print(f"small appends via {args.via}: {args.bursts} bursts of {args.appends} per case, alternating")
    print(f"{'case':<28}{'median appends/s':>18}{'min':>9}{'max':>9}{'server CPU ms/append':>22}")
    for label, export in (("lineage off (DISABLED)", False), ("lineage on (collector up)", True)):
        r = rates[export]
        cpu_col = statistics.median(cpu_ms[export])
        print(f"{label:<28}{statistics.median(r):>18.1f}{min(r):>9.1f}{max(r):>9.1f}{cpu_col:>22.2f}")
    print(f"ratio on/off (appends/s): {ratio:.3f} (target >= 0.95)")
    print(
        f"lineage CPU per append: worker thread {worker_cpu / commits * 1000:.3f} ms (in the server),"
        f" sender child {sender_cpu / commits * 1000:.3f} ms (separate process, nice 10);"
        f" an append with export off costs {cpu_off:.2f} ms of server CPU"
    )
    print(
        f"events delivered: {delivered} (appends' runs: {expected}; any more are the server's own maintenance"
        f" commits); median drain after a burst: {statistics.median(drains):.3f}s"
    )
    results = {
        "via": args.via,
        "appends_per_burst": args.appends,
        "bursts": args.bursts,
        "off_appends_per_s": rates[False],
        "on_appends_per_s": rates[True],
        "off_median": off_median,
        "on_median": on_median,
        "ratio": ratio,
        "target": 0.95,
        "off_server_cpu_ms_per_append": cpu_off,
        "on_server_cpu_ms_per_append": cpu_on,
        "lineage_worker_cpu_ms_per_append": worker_cpu / commits * 1000,
        "lineage_sender_cpu_ms_per_append": sender_cpu / commits * 1000,
        "events_delivered": delivered,
        "events_expected_at_least": expected,
        "drain_seconds": drains,
    }
    save_run(f"lineage_{args.via}", results)


if __name__ == "__main__":
    main()
