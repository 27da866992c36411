"""Many clients at once: icefloe vs the DataFusion Flight SQL peer at 1, 4, 16 and 64 clients.

Every client (its own ADBC connection) runs a mix for a fixed time, one query after another:
- ``point``: one row by a filter on a sorted key (``WHERE id = ?`` over 1M rows, literal SQL);
- ``q1`` / ``q6``: TPC-H Q1 and Q6 over lineitem at scale factor 0.1 (600k rows);
- ``scan``: ``SELECT *`` of the 1M-row table (3 columns);
- ``select1``: ``SELECT 1``.
Clients are threads spread over ``min(clients, 4)`` client processes (one Python process would
be the bottleneck before either server). Per target and client count: queries per second of
each kind, and p50 / p99 latency of each kind. Then icefloe alone with 16 readers while 8
writers append (DoPut, 1,000 rows each) to another table: the readers' p99 with and without.

The peer: ``benchmarks/datafusion_peer`` over the same Parquet files (skipped, saying why,
without cargo). Writes a run file ``benchmarks/results/concurrency-<UTC time>.json``.

With ``--read-workers N``: instead, icefloe with no read workers against icefloe with
``--read-workers N`` (two servers over two copies of the same data, both up, measured in turn
level by level, A B A B..., ``--repeats`` times; the median run of each is reported), at
``--clients`` (default 1,4,16 in this mode). Writes ``concurrency_workers-<UTC time>.json``.

Usage: python benchmarks/bench_concurrency.py [--seconds 8] [--clients 1,4,16,64] [--no-peer]
       python benchmarks/bench_concurrency.py --read-workers 2 [--repeats 3] [--seconds 6]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_flightsql_scan import BareProcess, peer_binary  # noqa: E402
from bench_tpch import CACHE, PEER, generate, scale_name  # noqa: E402
from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402
from tpch_queries import query  # noqa: E402

ROWS = 1_000_000
READY_LINE = re.compile(r"read worker \d+ ready on")
KINDS = ("point", "q1", "q6", "scan", "select1")


def statements(prefix: str) -> dict[str, Any]:
    """Each kind's SQL (``point`` takes the key)."""
    return {
        "point": lambda key: f"SELECT id, v, s FROM {prefix}kv WHERE id = {key}",
        "q1": lambda _: query(1, prefix),
        "q6": lambda _: query(6, prefix),
        "scan": lambda _: f"SELECT * FROM {prefix}kv",
        "select1": lambda _: "SELECT 1",
    }


def client_process(location: str, prefix: str, threads: int, seconds: float, ready: Any, go: Any, out: Any) -> None:
    """``threads`` clients, each with its own connection, from the start time the parent sends
    (once every client process has connected) for ``seconds``; sends [(kind, latency s)] back."""
    from adbc_driver_flightsql import dbapi as flightsql

    sql = statements(prefix)
    samples: list[tuple[str, float]] = []
    lock = threading.Lock()
    connections = [flightsql.connect(location, autocommit=True) for _ in range(threads)]
    ready.put(threads)
    start_at = go.get()

    def one(index: int) -> None:
        rng = random.Random(index)
        kinds = list(KINDS)
        rng.shuffle(kinds)
        mine: list[tuple[str, float]] = []
        conn = connections[index]
        while time.time() < start_at:
            time.sleep(0.005)
        i = 0
        while time.time() < start_at + seconds:
            kind = kinds[i % len(kinds)]
            i += 1
            t0 = time.perf_counter()
            try:
                with conn.cursor() as cur:
                    cur.execute(sql[kind](rng.randrange(ROWS)))
                    cur.fetch_arrow_table()
            except Exception as exc:  # e.g. the server's cap on concurrent queries: counted, not timed
                mine.append(("refused:" + kind, 0.0))
                if "too many concurrent" not in str(exc):
                    mine.append(("error:" + str(exc)[:120], 0.0))
                continue
            mine.append((kind, time.perf_counter() - t0))
        with lock:
            samples.extend(mine)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for conn in connections:
        conn.close()
    out.put(samples)


def run_level(location: str, prefix: str, clients: int, seconds: float) -> dict[str, Any]:
    processes = min(clients, 4)
    # spawn, not fork: a child forked after the parent loaded the ADBC driver hangs in connect
    context = multiprocessing.get_context("spawn")
    ready: Any = context.Queue()
    go: Any = context.Queue()
    queue: Any = context.Queue()
    procs = []
    for p in range(processes):
        threads = clients // processes + (1 if p < clients % processes else 0)
        proc = context.Process(target=client_process, args=(location, prefix, threads, seconds, ready, go, queue))
        proc.start()
        procs.append(proc)
    for _ in procs:
        ready.get()
    start_at = time.time() + 0.5
    for _ in procs:
        go.put(start_at)
    samples: list[tuple[str, float]] = []
    for _ in procs:
        samples.extend(queue.get())
    for proc in procs:
        proc.join()
    out: dict[str, Any] = {}
    for kind in KINDS:
        lat = sorted(s for k, s in samples if k == kind)
        if not lat:
            out[kind] = {"qps": 0.0, "p50_ms": None, "p99_ms": None, "n": 0}
            continue
        out[kind] = {"qps": len(lat) / seconds, "p50_ms": statistics.median(lat) * 1e3,
                     "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, "n": len(lat)}
    answered = [s for s in samples if not s[0].startswith(("refused:", "error:"))]
    out["total_qps"] = len(answered) / seconds
    out["refused"] = {kind: sum(1 for k, _ in samples if k == "refused:" + kind) for kind in KINDS}
    out["errors"] = sorted({k.removeprefix("error:") for k, _ in samples if k.startswith("error:")})
    return out


def writers(location: str, count: int, stop: threading.Event) -> list[float]:
    """``count`` DoPut writers appending 1,000 rows at a time until ``stop``; commit latencies."""
    latencies: list[float] = []
    batch = pa.table({"id": pa.array(range(1000), pa.int64()), "v": pa.array([1.5] * 1000)})

    def one() -> None:
        client = flight.FlightClient(location)
        while not stop.is_set():
            t0 = time.perf_counter()
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("bench", "sink"), batch.schema)
            writer.write_table(batch)
            writer.done_writing()
            reader.read()
            writer.close()
            latencies.append(time.perf_counter() - t0)
        client.close()

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join()
    return latencies


def load(location: str, kv: Path, lineitem: Path) -> None:
    """The benchmark's tables into a fresh server: bench.kv, bench.lineitem, bench.sink."""
    from adbc_driver_flightsql import dbapi as flightsql

    with flightsql.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA bench")
        cur.adbc_ingest("kv", pq.read_table(kv).to_reader(65536), mode="create", db_schema_name="bench")
        cur.adbc_ingest("lineitem", pq.read_table(lineitem).to_reader(65536), mode="create", db_schema_name="bench")
        cur.execute("CREATE TABLE bench.sink (id BIGINT, v DOUBLE)")


def write_kv(path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64()),
                             "v": pa.array([i * 0.5 for i in range(ROWS)]),
                             "s": pa.array([f"s{i % 1000}" for i in range(ROWS)])}), path, row_group_size=65536)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median total throughput (its per-kind figures stay one run's)."""
    return sorted(runs, key=lambda r: r["total_qps"])[len(runs) // 2]


def compare_read_workers(args: argparse.Namespace, levels: list[int], lineitem: Path) -> None:
    """icefloe without read workers (A) against icefloe with ``args.read_workers`` (B), interleaved."""
    n = args.read_workers
    results: dict[str, Any] = {"seconds": args.seconds, "cpu_count": os.cpu_count(), "levels": levels,
                               "read_workers": n, "repeats": args.repeats, "runs": {}, "load_average": []}
    with tempfile.TemporaryDirectory(prefix="icefloe-conc-") as tmp:
        kv = Path(tmp) / "kv.parquet"
        write_kv(kv)
        servers = {"0": ServerProcess(Path(tmp) / "w0"), str(n): ServerProcess(Path(tmp) / f"w{n}",
                                                                             ["--read-workers", str(n)])}
        try:
            for server in servers.values():
                server.start()
                load(server.location, kv, lineitem)
            while len(READY_LINE.findall(servers[str(n)].log)) < n:  # every worker in the rotation
                time.sleep(0.2)
            for clients in levels:
                runs: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
                for repeat in range(args.repeats):
                    for name, server in servers.items():
                        runs[name].append(run_level(server.location, "bench.", clients, args.seconds))
                        results["load_average"].append(os.getloadavg()[0])
                        print(f"workers {name} {clients:3} clients run {repeat + 1}: "
                              f"{runs[name][-1]['total_qps']:.1f} q/s, load {os.getloadavg()[0]:.1f}",
                              file=sys.stderr, flush=True)
                results["runs"][clients] = runs
        finally:
            for server in servers.values():
                server.stop()
    results["load_average_after"] = os.getloadavg()
    results["ratios"] = worker_ratios(results)
    report_workers(results)
    save_run("concurrency_workers", results)


def worker_ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """B / A throughput of each kind and in total, per client count, of the median runs."""
    n = str(results["read_workers"])
    out: dict[str, dict[str, float | None]] = {}
    for clients, runs in results["runs"].items():
        a, b = median_run(runs["0"]), median_run(runs[n])
        ratios: dict[str, float | None] = {k: b[k]["qps"] / a[k]["qps"] if a[k]["qps"] else None for k in KINDS}
        ratios["total"] = b["total_qps"] / a["total_qps"] if a["total_qps"] else None
        out[str(clients)] = ratios
    return out


def report_workers(results: dict[str, Any]) -> None:
    n = str(results["read_workers"])
    loads = results["load_average"]
    print(f"{results['cpu_count']} cores; {results['seconds']:g} s per run; median of {results['repeats']} runs, "
          f"A (no workers) and B (--read-workers {n}) interleaved; load average during runs "
          f"{min(loads):.1f}-{max(loads):.1f}")
    print(f"{'clients':>7} {'kind':>8} {'A q/s':>8} {'B q/s':>8} {'B/A':>6} {'A p50':>8} {'B p50':>8} "
          f"{'A p99':>8} {'B p99':>8}")
    fmt = lambda v: f"{v:8.1f}" if v is not None else f"{'-':>8}"  # noqa: E731
    for clients, runs in results["runs"].items():
        a, b = median_run(runs["0"]), median_run(runs[n])
        for kind in (*KINDS, "total"):
            if kind == "total":
                qa, qb = a["total_qps"], b["total_qps"]
                ratio = f"{qb / qa:6.2f}" if qa else f"{'-':>6}"
                print(f"{clients:7} {kind:>8} {qa:8.1f} {qb:8.1f} {ratio}")
                continue
            ka, kb = a[kind], b[kind]
            ratio = f"{kb['qps'] / ka['qps']:6.2f}" if ka["qps"] else f"{'-':>6}"
            print(f"{clients:7} {kind:>8} {ka['qps']:8.1f} {kb['qps']:8.1f} {ratio} {fmt(ka['p50_ms'])} "
                  f"{fmt(kb['p50_ms'])} {fmt(ka['p99_ms'])} {fmt(kb['p99_ms'])}")
        errors = sorted(set(a["errors"]) | set(b["errors"]))
        if errors:
            print(f"{clients:7} errors: {errors}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", default=None, help="default 1,4,16,64 (1,4,16 with --read-workers)")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--read-workers", type=int, default=0,
                        help="compare no read workers with this many (instead of the peer comparison)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    levels = [int(c) for c in (args.clients or ("1,4,16" if args.read_workers else "1,4,16,64")).split(",")]
    tpch = generate(0.1, CACHE / scale_name(0.1))
    if args.read_workers:
        compare_read_workers(args, levels, tpch / "lineitem.parquet")
        return
    peer_bin, peer_note = (None, "--no-peer") if args.no_peer else peer_binary()
    results: dict[str, Any] = {"seconds": args.seconds, "cpu_count": os.cpu_count(), "levels": levels,
                               "peer": PEER if peer_bin else f"skipped: {peer_note}", "icefloe": {}, "peer_runs": {}}
    with tempfile.TemporaryDirectory(prefix="icefloe-conc-") as tmp:
        kv = Path(tmp) / "kv.parquet"
        write_kv(kv)
        server = ServerProcess(Path(tmp) / "warehouse").start()
        peer = None
        try:
            load(server.location, kv, tpch / "lineitem.parquet")
            if peer_bin is not None:
                peer = BareProcess([str(peer_bin), f"kv={kv}", f"lineitem={tpch / 'lineitem.parquet'}"])
            for clients in levels:
                results["icefloe"][clients] = run_level(server.location, "bench.", clients, args.seconds)
                print(f"icefloe {clients:3} clients: {results['icefloe'][clients]['total_qps']:.1f} q/s, load "
                      f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
                if peer is not None:
                    results["peer_runs"][clients] = run_level(peer.location, "", clients, args.seconds)
                    print(f"peer    {clients:3} clients: {results['peer_runs'][clients]['total_qps']:.1f} q/s",
                          file=sys.stderr, flush=True)
            # readers with and without 8 writers appending meanwhile
            quiet = run_level(server.location, "bench.", 16, args.seconds)
            stop = threading.Event()
            commit_latencies: list[float] = []
            writer_thread = threading.Thread(target=lambda: commit_latencies.extend(writers(server.location, 8, stop)))
            writer_thread.start()
            busy = run_level(server.location, "bench.", 16, args.seconds)
            stop.set()
            writer_thread.join()
            results["with_writers"] = {"readers_quiet": quiet, "readers_with_8_writers": busy,
                                       "commits_per_s": len(commit_latencies) / args.seconds,
                                       "commit_p50_ms": statistics.median(commit_latencies) * 1e3
                                       if commit_latencies else None}
        finally:
            server.stop()
            if peer is not None:
                peer.stop()
    results["load_average_after"] = os.getloadavg()
    report(results)
    save_run("concurrency", results)


def report(results: dict[str, Any]) -> None:
    print(f"{results['cpu_count']} cores; {results['seconds']:g} s per level; load average after "
          f"{results['load_average_after'][0]:.1f}; peer: {results['peer']}")
    print(f"{'clients':>7} {'kind':>8} {'icefloe q/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'peer q/s':>9} {'p50 ms':>8}"
          f" {'p99 ms':>8} {'qps ratio':>9}")
    for clients, mine in results["icefloe"].items():
        theirs = results["peer_runs"].get(clients)
        for kind in KINDS:
            a = mine[kind]
            b = theirs[kind] if theirs else None
            fmt = lambda v: f"{v:8.1f}" if v is not None else f"{'-':>8}"  # noqa: E731
            ratio = f"{a['qps'] / b['qps']:9.2f}" if b and b["qps"] else f"{'-':>9}"
            print(f"{clients:7} {kind:>8} {a['qps']:12.1f} {fmt(a['p50_ms'])} {fmt(a['p99_ms'])} "
                  f"{(b['qps'] if b else 0):9.1f} {fmt(b['p50_ms'] if b else None)} {fmt(b['p99_ms'] if b else None)}"
                  f" {ratio}")
        refused = sum(mine.get("refused", {}).values())
        if refused:
            print(f"{clients:7} icefloe refused {refused} queries (RESOURCE_EXHAUSTED: its cap on concurrent queries)")
    base = results["icefloe"].get(1, {}).get("total_qps")
    if base:
        print("icefloe total q/s relative to 1 client: " + ", ".join(
            f"{c}: {r['total_qps'] / base:.2f}" for c, r in results["icefloe"].items()))
    w = results["with_writers"]
    quiet = max((w["readers_quiet"][k]["p99_ms"] or 0) for k in KINDS)
    busy = max((w["readers_with_8_writers"][k]["p99_ms"] or 0) for k in KINDS)
    ratio = f"{busy / quiet:.2f}x" if quiet else "-"
    print(f"16 readers, worst p99 across kinds: {quiet:.1f} ms quiet, {busy:.1f} ms with 8 writers "
          f"({ratio}, target <= 1.5); {w['commits_per_s']:.1f} commits/s")


if __name__ == "__main__":
    main()
