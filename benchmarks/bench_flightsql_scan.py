"""Flight SQL scan throughput and SELECT 1 latency: icefloe vs a bare pyarrow.flight + DuckDB
server and vs the peer a user would pick instead, a Rust Flight SQL server on DataFusion.

Same run, same client, same Parquet files, alternating order:
- icefloe: ``SELECT * FROM bench.events`` over Flight SQL (catalog, pinned snapshot; a plain
  scan streams the snapshot's Arrow datasets, no SQL engine over them);
- bare: a minimal pyarrow.flight server (no catalog, no Flight SQL) whose DoGet streams DuckDB
  ``read_parquet`` over exactly the table's data files;
- peer: ``datafusion-flight-sql-server`` 0.4.19 on DataFusion 55.2 (``benchmarks/datafusion_peer``,
  built once in release into ``~/.cache/icefloe/datafusion-peer-target``; skipped, with the
  reason, without cargo) serving the same files as table ``events``, plain strings (no view
  types), ``SELECT * FROM events``.
Each scan's server CPU seconds are read from /proc (user + system of the server process).
Targets: scan throughput >= 1.0x the peer and >= 0.9x the bare server; SELECT 1 p50
(GetFlightInfo + DoGet) <= 2x the bare server.

Usage: python benchmarks/bench_flightsql_scan.py [--rows 10000000] [--rounds 9] [--pings 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

from flight_server.flightsql import protocol  # noqa: E402

# -- the bare baseline server (runs in its own process, like icefloe) -----------------------


def serve_bare(files: list[str]) -> None:
    import duckdb

    file_list = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"

    class Bare(flight.FlightServerBase):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__("grpc://127.0.0.1:0")
            self.db = duckdb.connect()

        def _sql(self, raw: bytes) -> str:
            return raw.decode().replace("{files}", file_list)

        def get_flight_info(self, context: Any, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
            cur = self.db.cursor()
            schema = cur.sql(self._sql(descriptor.command)).limit(0).to_arrow_table().schema
            cur.close()
            return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(descriptor.command, [])], -1, -1)

        def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
            cur = self.db.cursor()
            return flight.RecordBatchStream(cur.sql(self._sql(ticket.ticket)).to_arrow_reader(122_880))

    server = Bare()
    print(f"bare listening on grpc://127.0.0.1:{server.port}", flush=True)
    server.serve()


class BareProcess:
    """A server child process that prints ``... listening on grpc://HOST:PORT`` when ready."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"{command[0]} did not start: {line!r}")
        self.location = line.strip().rsplit(" ", 1)[-1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


# -- the peer: a Rust Flight SQL server on DataFusion -------------------------------------------

PEER_CRATE = ROOT / "benchmarks" / "datafusion_peer"


def peer_binary() -> tuple[Path | None, str]:
    """The peer's release binary, built once (cached target folder); (None, why) without it."""
    cargo = shutil.which("cargo")
    if cargo is None:
        return None, "cargo is not installed (the peer is a Rust binary)"
    if shutil.which("protoc") is None and "PROTOC" not in os.environ:
        # arrow-flight's build generates its gRPC code with prost-build, which runs protoc.
        return None, "protoc is not installed (the peer's build needs it: apt-get install protobuf-compiler)"
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = cache_home / "icefloe" / "datafusion-peer-target"
    binary = target / "release" / "icefloe-datafusion-peer"
    build = subprocess.run([cargo, "build", "--release", "--locked", "-q"], cwd=PEER_CRATE,
                           env={**os.environ, "CARGO_TARGET_DIR": str(target)}, capture_output=True, text=True)
    if build.returncode != 0 or not binary.exists():
        return None, "the peer did not build: " + (build.stderr.strip().splitlines() or ["no output"])[-1]
    return binary, ""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- data -------------------------------------------------------------------------------------


def make_table(warehouse: Path, rows: int, files: int) -> list[str]:
    """``bench.events`` written through the catalog, ``files`` appends; returns its data files."""
    import pyarrow.compute as pc

    from catalog import RocksCatalog

    cat = RocksCatalog("bench", warehouse=str(warehouse))
    try:
        cat.create_namespace("bench")
        schema = pa.schema(
            [
                pa.field("id", pa.int64()),
                pa.field("user_id", pa.int32()),
                pa.field("amount", pa.float64()),
                pa.field("kind", pa.string()),
                pa.field("ts", pa.timestamp("us")),
            ]
        )
        table = cat.create_table("bench.events", schema)
        per = rows // files
        kinds = pa.array(["view", "click", "purchase", "refund"])
        for i in range(files):
            ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
            batch = pa.table(
                {
                    "id": ids,
                    "user_id": pc.cast(pc.bit_wise_and(ids, 0xFFFF), pa.int32()),
                    "amount": pc.divide(pc.cast(pc.bit_wise_and(ids, 0x3FF), pa.float64()), 7.0),
                    "kind": pc.take(kinds, pc.bit_wise_and(ids, 3)),
                    "ts": pc.cast(pc.add(ids, 1_700_000_000_000_000), pa.timestamp("us")),
                },
                schema=schema,
            )
            table = cat.load_table("bench.events")
            table.append(batch)
        table = cat.load_table("bench.events")
        return [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    finally:
        cat.close()


# -- measurements ------------------------------------------------------------------------------


def fetch(client: flight.FlightClient, command: bytes) -> tuple[int, int]:
    """GetFlightInfo + DoGet of every endpoint; returns (rows, Arrow bytes) without keeping batches."""
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
    rows = nbytes = 0
    for endpoint in info.endpoints:
        for chunk in client.do_get(endpoint.ticket):
            rows += chunk.data.num_rows
            nbytes += chunk.data.nbytes
    return rows, nbytes


def fetch_split(client: flight.FlightClient, readers: list[flight.FlightClient], command: bytes,
                parts: int) -> tuple[int, int]:
    """GetFlightInfo asking for ``parts`` endpoints, then one client thread per endpoint.

    Each thread reads through its own connection of ``readers``, opened once per run as the
    single stream's is: a parallel reader keeps its connections, and a new HTTP/2 connection
    would start every endpoint at gRPC's smallest flow-control window."""
    import threading

    options = flight.FlightCallOptions(headers=[(b"icefloe.scan.target-partition-bytes", b"1"),
                                                (b"icefloe.scan.max-partitions", str(parts).encode())])
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    totals: list[tuple[int, int]] = []
    lock = threading.Lock()

    def read(own: flight.FlightClient, ticket: flight.Ticket) -> None:
        rows = nbytes = 0
        for chunk in own.do_get(ticket):
            rows += chunk.data.num_rows
            nbytes += chunk.data.nbytes
        with lock:
            totals.append((rows, nbytes))

    threads = [threading.Thread(target=read, args=(readers[i % len(readers)], e.ticket))
               for i, e in enumerate(info.endpoints)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r for r, _ in totals), sum(b for _, b in totals)


def ticket_check_ms(repeat: int = 5000) -> float:
    """What signed tickets add to one query, measured in-process on the server's own code: seal
    the handle at GetFlightInfo; at DoGet open it (HMAC check, JSON decode), classify the SQL
    again and find it in the policy cache (the full policy check already ran at planning)."""
    import os as _os

    from flight_server.engine import Engine
    from flight_server.flightsql.statements import HandleCodec, StatementHandle
    from flight_server.security.handles import HandleSigner

    class _NoCatalog:
        def load_table(self, identifier: Any) -> Any:
            raise ValueError(identifier)

    codec = HandleCodec(HandleSigner([_os.urandom(32)]))
    engine = Engine(_NoCatalog(), query_timeout_s=60)
    try:
        sql, pins = engine.plan("SELECT 1", None)
        handle = StatementHandle(sql, None, pins, None)
        engine.check(sql, None, pins)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            sealed = codec.statement(handle)
            opened = codec.open_statement(sealed)
            engine.classify(opened.sql)
            engine.check(opened.sql, opened.default_schema, opened.pins)
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pings", type=int, default=300)
    parser.add_argument("--serve-bare", nargs="*")
    args = parser.parse_args()
    if args.serve_bare is not None:
        serve_bare(args.serve_bare)
        return

    peer_bin, peer_skip = peer_binary()  # built (or found built) before anything is timed
    if peer_bin is None:
        print(f"peer skipped: {peer_skip}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="icefloe-bench-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        t0 = time.perf_counter()
        files = make_table(warehouse, args.rows, args.files)
        print(f"wrote {args.rows:,} rows in {len(files)} files ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
        icefloe = ServerProcess(warehouse).start()
        bare = BareProcess([sys.executable, __file__, "--serve-bare", *files])
        peer = BareProcess([str(peer_bin), *files]) if peer_bin is not None else None
        try:
            measured = measure(args, icefloe, bare, peer)
        finally:
            icefloe.stop()
            bare.stop()
            if peer is not None:
                peer.stop()
    report(args, len(files), measured, peer_skip)


def measure(args: argparse.Namespace, icefloe: ServerProcess, bare: BareProcess,
            peer: BareProcess | None) -> dict[str, Any]:
    """Alternating rounds of every target's full scan (MB/s, server CPU s), selective scans and
    SELECT 1 pings; the raw samples by target."""
    assert icefloe.proc is not None
    clients = {"icefloe": flight.FlightClient(icefloe.location), "bare": flight.FlightClient(bare.location)}
    pids = {"icefloe": icefloe.proc.pid, "bare": bare.proc.pid, "icefloe_split4": icefloe.proc.pid}
    full = {"icefloe": protocol.CommandStatementQuery("SELECT * FROM bench.events").pack(),
            "bare": b"SELECT * FROM read_parquet({files})"}
    ping = {"icefloe": protocol.CommandStatementQuery("SELECT 1").pack(), "bare": b"SELECT 1"}
    lo = args.rows // 2
    where = f"WHERE id BETWEEN {lo} AND {lo + 999}"
    selective = {"icefloe": protocol.CommandStatementQuery(f"SELECT * FROM bench.events {where}").pack(),
                 "bare": f"SELECT * FROM read_parquet({{files}}) {where}".encode()}
    if peer is not None:
        clients["peer"] = flight.FlightClient(peer.location)
        pids["peer"] = peer.proc.pid
        full["peer"] = protocol.CommandStatementQuery("SELECT * FROM events").pack()
        ping["peer"] = protocol.CommandStatementQuery("SELECT 1").pack()
        selective["peer"] = protocol.CommandStatementQuery(f"SELECT * FROM events {where}").pack()
    if peer is not None:  # the same answer types (plain strings, no view types), or no comparison
        types = {name: [f.type for f in clients[name].get_flight_info(
            flight.FlightDescriptor.for_command(full[name])).schema] for name in ("icefloe", "peer")}
        assert types["icefloe"] == types["peer"], types
    for name, cmd in full.items():  # warm-up: caches, footers, connections
        rows, _ = fetch(clients[name], cmd)
        assert rows == args.rows, (name, rows)
        fetch(clients[name], ping[name])

    readers = [flight.FlightClient(icefloe.location) for _ in range(4)]
    fetch_split(clients["icefloe"], readers, full["icefloe"], 4)  # warm-up: the readers' connections
    names = [*full, "icefloe_split4"]
    throughput: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    size = 0
    for r in range(args.rounds):
        shift = r % len(names)  # each target takes each place in the order as often
        for name in names[shift:] + names[:shift]:
            before = cpu_seconds(pids[name])
            start = time.perf_counter()
            if name == "icefloe_split4":
                rows, size = fetch_split(clients["icefloe"], readers, full["icefloe"], 4)
            else:
                rows, size = fetch(clients[name], full[name])
            elapsed = time.perf_counter() - start
            assert rows == args.rows, (name, rows)
            throughput[name].append(size / elapsed / 1e6)
            cpu[name].append(cpu_seconds(pids[name]) - before)

    # A selective query: icefloe skips files by manifest bounds, bare DuckDB by footers.
    select_ms: dict[str, list[float]] = {name: [] for name in selective}
    for r in range(args.rounds * 4):
        order = list(selective)
        for name in order[r % len(order):] + order[: r % len(order)]:
            start = time.perf_counter()
            rows, _ = fetch(clients[name], selective[name])
            select_ms[name].append((time.perf_counter() - start) * 1e3)
            assert rows == 1000, (name, rows)

    latency: dict[str, list[float]] = {name: [] for name in ping}
    block = 20
    for b in range(max(1, args.pings // block)):
        order = list(ping)
        for name in order[b % len(order):] + order[: b % len(order)]:
            for _ in range(block):
                start = time.perf_counter()
                fetch(clients[name], ping[name])
                latency[name].append((time.perf_counter() - start) * 1e3)
    for client in [*clients.values(), *readers]:
        client.close()
    return {"throughput": throughput, "cpu": cpu, "size": size, "select_ms": select_ms, "latency": latency}


def _paired(a: list[float], b: list[float]) -> float:
    """Median of per-round ratios: each round ran both back to back, so this cancels slow
    drifts of the (shared) machine's load better than a ratio of medians."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def report(args: argparse.Namespace, files: int, measured: dict[str, Any], peer_skip: str) -> None:
    throughput, cpu, size = measured["throughput"], measured["cpu"], measured["size"]
    latency, select_ms = measured["latency"], measured["select_ms"]
    scan = {k: statistics.median(v) for k, v in throughput.items()}
    scan_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    p50 = {k: statistics.median(v) for k, v in latency.items()}
    p99 = {k: sorted(v)[int(len(v) * 0.99) - 1] for k, v in latency.items()}
    ticket_ms = ticket_check_ms()
    has_peer = "peer" in scan
    result: dict[str, Any] = {
        "rows": args.rows,
        "files": files,
        "arrow_mb": size / 1e6,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "scan_mb_s": scan,
        "scan_mb_s_all": throughput,
        # Server CPU seconds per full scan (user + system of the server process; the split
        # scan's four streams together).
        "scan_server_cpu_s": scan_cpu,
        "scan_server_cpu_s_all": cpu,
        "scan_ratio": scan["icefloe"] / scan["bare"],
        "scan_ratio_paired_median": _paired(throughput["icefloe"], throughput["bare"]),
        "scan_target": ">= 0.9",
        "peer": "datafusion-flight-sql-server 0.4.19, DataFusion 55.2" if has_peer else f"skipped: {peer_skip}",
        "peer_ratio": scan["icefloe"] / scan["peer"] if has_peer else None,
        "peer_ratio_paired_median": _paired(throughput["icefloe"], throughput["peer"]) if has_peer else None,
        "peer_target": ">= 1.0",
        # Four endpoints of one split scan read by four client threads, against one stream.
        "split4_ratio": scan["icefloe_split4"] / scan["icefloe"],
        "select1_p50_ms": p50,
        "select1_p99_ms": p99,
        "select1_ratio": p50["icefloe"] / p50["bare"],
        "select1_target": "<= 2.0",
        "selective_1000_rows_ms": {k: statistics.median(v) for k, v in select_ms.items()},
        # Sealing a ticket at GetFlightInfo plus opening and re-checking it at DoGet, per query.
        "ticket_seal_check_ms": ticket_ms,
        "ticket_share_of_select1_p50": ticket_ms / p50["icefloe"],
        "ticket_target": "<= 0.05",
    }
    print(
        f"load average {os.getloadavg()[0]:.1f}; SELECT * over {args.rows:,} rows "
        f"({size / 1e6:.0f} MB Arrow), {args.rounds} alternating rounds, median:"
    )
    print(f"{'':15} {'MB/s':>8} {'server CPU s':>13} {'ratio':>22} {'target':>8}")
    for name in scan:
        ratio, target = "", ""
        if name == "bare":
            ratio, target = f"icefloe/bare {result['scan_ratio']:.2f}", ">= 0.9"
        elif name == "peer":
            ratio, target = f"icefloe/peer {result['peer_ratio']:.2f}", ">= 1.0"
        elif name == "icefloe_split4":
            ratio, target = f"split/single {result['split4_ratio']:.2f}", ">= 1.0"
        print(f"{name:15} {scan[name]:8.1f} {scan_cpu[name]:13.2f} {ratio:>22} {target:>8}")
    print(f"  paired per-round ratios: icefloe/bare {result['scan_ratio_paired_median']:.2f}"
          + (f", icefloe/peer {result['peer_ratio_paired_median']:.2f}" if has_peer else f"; peer {peer_skip}")
          + f"; split x4 / single {result['split4_ratio']:.2f} (4 endpoints, 4 client threads)")
    print(f"{'SELECT 1':15} " + "  ".join(f"{k} {v:.2f} ms" for k, v in p50.items())
          + f"   (p50 of {len(latency['icefloe'])} each; icefloe/bare {result['select1_ratio']:.2f}, target <= 2.0)")
    print(f"{'tickets':15} {ticket_ms:.3f} ms, {result['ticket_share_of_select1_p50']:.3f} of icefloe's SELECT 1 p50"
          " (target <= 0.05)")
    print(f"{'WHERE id':15} " + "  ".join(f"{k} {v:.2f} ms" for k, v in result["selective_1000_rows_ms"].items())
          + f"   (1,000 of {args.rows:,} rows, median)")
    save_run("flightsql_scan", result)


if __name__ == "__main__":
    main()
