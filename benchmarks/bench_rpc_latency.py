"""One client's round trip: ADBC ``SELECT 1`` and point lookups, icefloe vs the DataFusion peer.

The probe docs/benchmarks-analytic.md describes ("Where a ``SELECT 1`` goes"): one ADBC
connection per server, ``--calls`` queries of each kind against icefloe and then the peer, in
turn, ``--rounds`` times; per round the p50 of each and the server's CPU per query (from
/proc). The ratio that counts is the median over rounds of icefloe's p50 / the peer's.

It also measures the floor of one RPC: an unknown action refused at once, sent with
pyarrow.flight to icefloe and to a bare ``pyarrow.flight`` server with no middleware (server
CPU per call), so the share of our middlewares and dispatch is a measured difference.

``--baseline PATH`` also serves the same data from another checkout of icefloe (e.g. main
before a change) in the same rounds, so a change is measured side by side on a loaded machine.

Usage: python benchmarks/bench_rpc_latency.py [--calls 200] [--rounds 3] [--no-peer] [--baseline PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_concurrency import ROWS, load, write_kv  # noqa: E402
from bench_flightsql_scan import BareProcess, cpu_seconds, peer_binary  # noqa: E402
from bench_tpch import CACHE, PEER, generate, scale_name  # noqa: E402
from run_records import save_run  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

# A pyarrow.flight server with no middleware and no work: the floor of one Python RPC here.
BARE_SERVER = textwrap.dedent("""
    import pyarrow.flight as flight

    class Bare(flight.FlightServerBase):
        def do_action(self, context, action):
            raise flight.FlightServerError("unknown action")

    server = Bare("grpc://127.0.0.1:0")
    print(f"bare listening on grpc://127.0.0.1:{server.port}", flush=True)
    server.serve()
""")


def refused_action_cpu_ms(location: str, pid: int, calls: int) -> float:
    """Server CPU per unknown action refused (ms)."""
    client = flight.FlightClient(location)
    for _ in range(50):  # warm-up
        _refuse(client)
    before = cpu_seconds(pid)
    for _ in range(calls):
        _refuse(client)
    used = cpu_seconds(pid) - before
    client.close()
    return used / calls * 1e3


def _refuse(client: flight.FlightClient) -> None:
    try:
        list(client.do_action(flight.Action("no.such.action", b"")))
    except (flight.FlightError, pa.ArrowException):
        pass  # refused, as expected


def probe(location: str, pid: int, sql: Any, calls: int) -> dict[str, float]:
    """``calls`` ADBC queries on one connection: p50, p90 (ms) and server CPU per query (ms)."""
    from adbc_driver_flightsql import dbapi as flightsql

    rng = random.Random(7)
    with flightsql.connect(location, autocommit=True) as conn:
        for _ in range(20):  # warm-up
            with conn.cursor() as cur:
                cur.execute(sql(rng.randrange(ROWS)))
                cur.fetch_arrow_table()
        latencies = []
        before = cpu_seconds(pid)
        for _ in range(calls):
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                cur.execute(sql(rng.randrange(ROWS)))
                cur.fetch_arrow_table()
            latencies.append(time.perf_counter() - t0)
        used = cpu_seconds(pid) - before
    latencies.sort()
    return {"p50_ms": statistics.median(latencies) * 1e3, "p90_ms": latencies[int(len(latencies) * 0.9)] * 1e3,
            "cpu_ms": used / calls * 1e3}


KINDS = {
    "select1": (lambda _key: "SELECT 1", lambda _key: "SELECT 1"),
    "point": (lambda key: f"SELECT id, v, s FROM bench.kv WHERE id = {key}",
              lambda key: f"SELECT id, v, s FROM kv WHERE id = {key}"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--extra-args", default="", help="more `icefloe serve` arguments")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which of select1,point to run")
    parser.add_argument("--baseline", default=None, help="another icefloe checkout to serve the same data too")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    peer_bin, peer_note = (None, "--no-peer") if args.no_peer else peer_binary()
    tpch = generate(0.1, CACHE / scale_name(0.1))
    results: dict[str, Any] = {"calls": args.calls, "rounds": args.rounds, "baseline": args.baseline,
                               "load_average_before": os.getloadavg(),
                               "peer": PEER if peer_bin else f"skipped: {peer_note}", "runs": []}
    with tempfile.TemporaryDirectory(prefix="icefloe-rpc-") as tmp:
        kv = Path(tmp) / "kv.parquet"
        write_kv(kv)
        # Both checkouts start the same way (ServeProcess: same environment, same log draining),
        # so a difference between them is the code's, not the launcher's.
        server = ServeProcess(Path(tmp) / "warehouse", extra_args=args.extra_args.split())
        bare = BareProcess([sys.executable, "-c", BARE_SERVER])
        peer = None
        baseline = None
        try:
            load(server.location, kv, tpch / "lineitem.parquet")
            if args.baseline:
                baseline = ServeProcess(Path(tmp) / "baseline-warehouse", root=Path(args.baseline))
                load(baseline.location, kv, tpch / "lineitem.parquet")
            if peer_bin is not None:
                peer = BareProcess([str(peer_bin), f"kv={kv}", f"lineitem={tpch / 'lineitem.parquet'}"])
            floors = {"icefloe": [], "bare": []}
            for _ in range(3):  # interleaved: icefloe, bare, icefloe, bare...
                floors["icefloe"].append(refused_action_cpu_ms(server.location, server.proc.pid, 1000))
                floors["bare"].append(refused_action_cpu_ms(bare.location, bare.proc.pid, 1000))
            results["refused_action_cpu_ms"] = {k: statistics.median(v) for k, v in floors.items()}
            for round_ in range(args.rounds):
                run: dict[str, Any] = {"load_average": os.getloadavg()}
                for kind in kinds:
                    ours, theirs = KINDS[kind]
                    sides = [("icefloe", server, ours)]
                    if baseline is not None:
                        sides.append(("baseline", baseline, ours))
                    if peer is not None:
                        sides.append(("peer", peer, theirs))
                    # The order turns each round: no side always runs first (or after another).
                    turn = round_ % len(sides)
                    run[kind] = {name: probe(proc.location, proc.proc.pid, sql, args.calls)
                                 for name, proc, sql in sides[turn:] + sides[:turn]}
                    if peer is not None:
                        run[kind]["p50_ratio"] = run[kind]["icefloe"]["p50_ms"] / run[kind]["peer"]["p50_ms"]
                    if baseline is not None:
                        run[kind]["vs_baseline"] = run[kind]["icefloe"]["p50_ms"] / run[kind]["baseline"]["p50_ms"]
                results["runs"].append(run)
                print(f"round {round_ + 1}: load {run['load_average'][0]:.1f}; " + "; ".join(
                    f"{kind} icefloe p50 {run[kind]['icefloe']['p50_ms']:.2f} ms cpu "
                    f"{run[kind]['icefloe']['cpu_ms']:.2f} ms"
                    + (f", peer p50 {run[kind]['peer']['p50_ms']:.2f} ms cpu {run[kind]['peer']['cpu_ms']:.2f} ms, "
                       f"ratio {run[kind]['p50_ratio']:.2f}" if "peer" in run[kind] else "")
                    + (f", baseline p50 {run[kind]['baseline']['p50_ms']:.2f} ms cpu "
                       f"{run[kind]['baseline']['cpu_ms']:.2f} ms" if "baseline" in run[kind] else "")
                    for kind in kinds), file=sys.stderr, flush=True)
        finally:
            server.stop()
            bare.stop()
            if baseline is not None:
                baseline.stop()
            if peer is not None:
                peer.stop()
    results["load_average_after"] = os.getloadavg()
    for kind in kinds:
        ratios = [run[kind]["p50_ratio"] for run in results["runs"] if "p50_ratio" in run[kind]]
        results[f"{kind}_p50_ratio"] = statistics.median(ratios) if ratios else None
        results[f"{kind}_cpu_ms"] = statistics.median(run[kind]["icefloe"]["cpu_ms"] for run in results["runs"])
        if args.baseline:
            results[f"{kind}_vs_baseline"] = statistics.median(run[kind]["vs_baseline"] for run in results["runs"])
            results[f"{kind}_baseline_cpu_ms"] = statistics.median(run[kind]["baseline"]["cpu_ms"]
                                                                   for run in results["runs"])
            base_ratios = [run[kind]["baseline"]["p50_ms"] / run[kind]["peer"]["p50_ms"] for run in results["runs"]
                           if "peer" in run[kind]]
            results[f"{kind}_baseline_p50_ratio"] = statistics.median(base_ratios) if base_ratios else None
    print(f"refused action, server CPU per call: icefloe {results['refused_action_cpu_ms']['icefloe']:.3f} ms, "
          f"bare pyarrow.flight {results['refused_action_cpu_ms']['bare']:.3f} ms")
    for kind in kinds:
        ratio = results[f"{kind}_p50_ratio"]
        print(f"{kind}: median p50 ratio icefloe/peer {ratio:.2f}" if ratio is not None else f"{kind}: no peer",
              f"(icefloe CPU per query {results[f'{kind}_cpu_ms']:.2f} ms)")
        if args.baseline:
            print(f"  baseline: p50 / peer {results[f'{kind}_baseline_p50_ratio']}, CPU per query "
                  f"{results[f'{kind}_baseline_cpu_ms']:.2f} ms; icefloe / baseline p50 "
                  f"{results[f'{kind}_vs_baseline']:.2f}")
    print(f"load average before {results['load_average_before'][0]:.1f}, after {results['load_average_after'][0]:.1f}")
    save_run("rpc_latency", results)


if __name__ == "__main__":
    main()
