"""Commit feed: commit -> subscriber latency, and writer throughput with stalled subscribers.

A real ``icefloe serve`` process; the writer appends 100-row batches with Flight DoPut (one
commit each) and notes when each DoPut is acknowledged; subscribers are pyarrow.flight
clients in separate processes and, when Go is installed, also the arrow-go subscriber in
``feed_subscriber_go`` (all streams in one process).

1. Latency: from the writer's acknowledgement to the event's arrival at each subscriber,
   with 1, 10 and 100 subscribers (paced commits, so each is measured on its own). Also
   reported: from ``committed_at`` (stamped just before the fsync) to arrival. The event is
   published as soon as the commit is durable, before the DoPut answer travels back, so
   ack -> arrival can be negative. One warm-up commit per scenario is not counted (each
   stream's first event also carries the Arrow schema); its worst arrival is reported.
   Subscribers are spread over four client processes (threads within each); the server's
   background maintenance runs as usual (it compacts the benchmark table every ~16 commits).
   When Go / cargo are installed, the same scenarios run with the arrow-go subscriber and
   with the Rust subscriber (``icefloe-feed``'s ``CommitStream``, example
   ``bench_subscriber``; arrival = when the stream yields the decoded event), all in the
   same run.
2. Throughput: DoPut appends/s with no subscriber vs with 20 subscribers that never read
   (their gRPC writes block), alternating rounds; the ratio is median with / median without.
   Twice: the subscribers in their own client processes, and as 20 feeds with 50 ms
   heartbeats on the writer's own client connection (what a service that appends and
   follows the feed through one client does; the server's writes to them block at once).

    python benchmarks/bench_feed.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_records import save_run  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

from catalog import RocksCatalog  # noqa: E402

# The alternative subscriber in Go (same command line and stdout as subscriber_main).
GO_SUBSCRIBER = ROOT / "benchmarks" / "feed_subscriber_go"
# The Rust client crate; its example bench_subscriber follows the same contract.
RUST_WORKSPACE = ROOT / "clients" / "rust"
# Client processes the Python subscriber streams are spread over (threads within each);
# on 2 cores, 4 measured lower latency than 1, 2, 10 or 25.
SUBSCRIBER_PROCESSES = 4
# Where each subscriber client's latency rows go in the results.
LATENCY_KEYS = {"python": "latency", "go": "latency_go", "rust": "latency_rust"}
# Client channel options under which a non-reading client blocks the server's writes at once.
STALLING_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
# Tables of the two throughput scenarios: stalled subscribers in their own processes, and on
# the writer's own connection.
THROUGHPUT_PREFIXES = ("tp", "tp_own")
# The second scenario's subscribers: 50 ms heartbeats, the shortest allowed.
OWN_CONNECTION_HEARTBEAT_MS = 50
ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "name": pa.array([f"r{i}" for i in range(100)])})


# -- subscriber processes ---------------------------------------------------------------------


def subscriber_main(location: str, streams: int, expected: int, stalled: bool) -> None:
    """Open ``streams`` feeds; print "ready"; then (unless stalled) print arrivals as JSON."""
    request = json.dumps({"feed": "commits.v1", "after": "latest", "tables": ["bench.*"]}).encode()
    # Per stream: (seq, arrival ns, committed_at us).
    arrivals: list[list[tuple[int, int, int]]] = [[] for _ in range(streams)]
    hello = threading.Barrier(streams + 1)
    done = threading.Event()
    calls = []

    def follow(i: int) -> None:
        client = flight.FlightClient(location, generic_options=STALLING_OPTIONS if stalled else [])
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(request))
        writer.done_writing()
        # Keep the writer referenced: dropping it closes the call, which waits for the server
        # to end a stream that never ends.
        calls.append((client, writer, reader))
        reader.read_chunk()  # hello
        hello.wait()
        if stalled:
            done.wait()
            return
        got = arrivals[i]
        while len(got) < expected:
            chunk = reader.read_chunk()
            now = time.time_ns()
            if chunk.data is not None:
                seqs = chunk.data.column("seq").to_pylist()
                stamps = chunk.data.column("committed_at").cast(pa.int64()).to_pylist()
                # Only the writer's appends count (background compaction commits too).
                ops = chunk.data.column("operation").to_pylist()
                got.extend((seq, now, ts) for seq, ts, op in zip(seqs, stamps, ops, strict=True) if op == "append")

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    hello.wait(timeout=120)
    print("ready", flush=True)
    if stalled:
        sys.stdin.readline()  # hold the streams open (unread) until the parent is done
        done.set()
    else:
        for t in threads:
            t.join(timeout=600)
        print(json.dumps(arrivals), flush=True)
    for _client, _writer, reader in calls:
        try:
            reader.cancel()
        except Exception:
            pass
    os._exit(0)


def _built(label: str, tool: str, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> bool:
    """Run a subscriber's build; False, with the reason printed, when it cannot be built."""
    exe = shutil.which(tool)
    if exe is None:
        print(f"{label} subscriber unavailable: `{tool}` is not on PATH")
        return False
    build = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if build.returncode != 0:
        reason = (build.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{label} subscriber unavailable: {tool} build failed: {reason}")
        return False
    return True


@cache
def go_subscriber_binary() -> Path | None:
    """Build the Go subscriber (once per run); None, with the reason printed, if we cannot."""
    binary = GO_SUBSCRIBER / "feedsub"
    return binary if _built("Go", "go", ["build", "-o", str(binary), "."], GO_SUBSCRIBER) else None


@cache
def rust_subscriber_binary() -> Path | None:
    """Build the Rust subscriber (release, once per run); None, with the reason printed, if we cannot."""
    # The same cached target folder as scripts/test-rust (outside the clone).
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = Path(os.environ.get("CARGO_TARGET_DIR", cache_home / "icefloe" / "cargo-target"))
    args = ["build", "--release", "--locked", "--example", "bench_subscriber"]
    if not _built("Rust", "cargo", args, RUST_WORKSPACE, {**os.environ, "CARGO_TARGET_DIR": str(target)}):
        return None
    return target / "release" / "examples" / "bench_subscriber"


class Subscribers:
    """``count`` subscriber streams spread over a few client processes (``client="python"``),
    or all in one Go process (``client="go"``, goroutines) or one Rust process
    (``client="rust"``, tokio tasks on one shared connection)."""

    def __init__(
        self, location: str, count: int, expected: int, stalled: bool = False, client: str = "python"
    ) -> None:
        self.procs: list[subprocess.Popen[str]] = []

        def args(streams: int) -> list[str]:
            return [location, str(streams), str(expected), "1" if stalled else "0"]

        if client == "go":
            binary = go_subscriber_binary()
            if binary is None:
                raise RuntimeError("the Go subscriber is unavailable")
            commands = [[str(binary), *args(count)]]
        elif client == "rust":
            binary = rust_subscriber_binary()
            if binary is None:
                raise RuntimeError("the Rust subscriber is unavailable")
            commands = [[str(binary), *args(count)]]
        elif client == "python":
            nprocs = min(count, SUBSCRIBER_PROCESSES)
            per = [count // nprocs + (1 if i < count % nprocs else 0) for i in range(nprocs)]
            commands = [[sys.executable, __file__, "subscriber", *args(n)] for n in per]
        else:
            raise ValueError(f"unknown subscriber client {client!r}")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for cmd in commands:
            self.procs.append(
                subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            )
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                self.close()
                raise RuntimeError(f"subscriber process failed to start: {line!r}")

    def arrivals(self) -> list[list[tuple[int, int, int]]]:
        out: list[list[tuple[int, int, int]]] = []
        for proc in self.procs:
            assert proc.stdout is not None
            out.extend([(a[0], a[1], a[2]) for a in stream] for stream in json.loads(proc.stdout.readline()))
        return out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- measurements -----------------------------------------------------------------------------


class Writer:
    """Appends ``ROWS`` to a table with DoPut; returns the acknowledged commit seq."""

    def __init__(self, location: str, generic_options: list[tuple[str, Any]] | None = None) -> None:
        self.client = flight.FlightClient(location, generic_options=generic_options or [])

    def append(self, table: str) -> int:
        writer, reader = self.client.do_put(flight.FlightDescriptor.for_path(*table.split(".")), ROWS.schema)
        writer.write_table(ROWS)
        writer.done_writing()
        answer = reader.read()
        writer.close()
        assert answer is not None
        return int(json.loads(answer.to_pybytes())["commit_seq"])

    def close(self) -> None:
        self.client.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def measure_latency(
    writer: Writer, location: str, subscribers: int, commits: int, gap_s: float, client: str = "python"
) -> dict[str, Any]:
    # One warm-up commit first, not counted: each stream's first event also carries the
    # Arrow schema, and the subscribers' first read sets up their readers.
    subs = Subscribers(location, subscribers, expected=commits + 1, client=client)
    acks: dict[int, int] = {}
    try:
        for _ in range(commits + 1):
            seq = writer.append(f"bench.lat{subscribers}")
            acks[seq] = time.time_ns()
            time.sleep(gap_s)
        arrivals = subs.arrivals()
    finally:
        subs.close()
    for stream in arrivals:
        assert [seq for seq, _, _ in stream] == sorted(acks), ([seq for seq, _, _ in stream], sorted(acks))
    warmup = min(acks)
    counted = [[a for a in stream if a[0] != warmup] for stream in arrivals]
    from_ack = [(t - acks[seq]) / 1e6 for stream in counted for seq, t, _ in stream]
    from_commit = [(t - committed * 1000) / 1e6 for stream in counted for _, t, committed in stream]
    # The slowest subscriber per commit: what "every subscriber has heard of it" costs.
    last_by_seq: dict[int, float] = {}
    for stream in counted:
        for seq, t, _ in stream:
            last_by_seq[seq] = max(last_by_seq.get(seq, float("-inf")), (t - acks[seq]) / 1e6)
    return {
        "subscribers": subscribers,
        "events": len(from_ack),
        "ack_to_arrival_p50_ms": round(percentile(from_ack, 50), 2),
        "ack_to_arrival_p99_ms": round(percentile(from_ack, 99), 2),
        "ack_to_arrival_max_ms": round(max(from_ack), 2),
        "ack_to_last_subscriber_p50_ms": round(percentile(list(last_by_seq.values()), 50), 2),
        "commit_to_arrival_p50_ms": round(percentile(from_commit, 50), 2),
        "commit_to_arrival_p99_ms": round(percentile(from_commit, 99), 2),
        "warmup_ack_to_arrival_max_ms": round(
            max((t - acks[seq]) / 1e6 for stream in arrivals for seq, t, _ in stream if seq == warmup), 2
        ),
    }


def append_rate(writer: Writer, table: str, commits: int) -> float:
    start = time.perf_counter()
    for _ in range(commits):
        writer.append(table)
    return commits / (time.perf_counter() - start)


def open_stalled_processes(location: str, count: int) -> Callable[[], None]:
    """``count`` never-reading subscribers in their own client processes; returns the closer."""
    subs = Subscribers(location, count, expected=0, stalled=True)
    return subs.close


def open_stalled_on(client: flight.FlightClient, count: int, heartbeat_ms: int) -> Callable[[], None]:
    """``count`` feeds of every commit on ``client``'s own connection that are never read;
    returns the closer."""
    request = json.dumps({"feed": "commits.v1", "after": "latest", "heartbeat_ms": heartbeat_ms}).encode()
    calls = []
    for _ in range(count):
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(request))
        writer.done_writing()
        calls.append((writer, reader))

    def close() -> None:
        for _writer, reader in calls:
            try:
                reader.cancel()
            except Exception:
                pass

    return close


def measure_throughput(
    writer: Writer, open_load: Callable[[], Callable[[], None]], prefix: str, commits: int, rounds: int
) -> dict[str, Any]:
    """Appends/s with no load vs with ``open_load()``'s streams open, alternating rounds."""
    without: list[float] = []
    with_stalled: list[float] = []
    append_rate(writer, f"bench.{prefix}_warmup", commits)  # caches, connections, first-append costs
    for r in range(rounds):
        # Alternate which side goes first so drift on a shared machine hits both alike.
        for side in (("base", "stalled") if r % 2 == 0 else ("stalled", "base")):
            if side == "base":
                without.append(append_rate(writer, f"bench.{prefix}_base{r}", commits))
                continue
            close = open_load()
            try:
                time.sleep(0.5)  # let their streams settle (blocked in gRPC writes or idle)
                with_stalled.append(append_rate(writer, f"bench.{prefix}_stalled{r}", commits))
            finally:
                close()
    base, loaded = statistics.median(without), statistics.median(with_stalled)
    return {
        "commits_per_round": commits,
        "rounds": rounds,
        "appends_per_s_without": [round(x, 2) for x in without],
        "appends_per_s_with_stalled": [round(x, 2) for x in with_stalled],
        "median_without": round(base, 2),
        "median_with_stalled": round(loaded, 2),
        "ratio": round(loaded / base, 3),
    }


def prepare(warehouse: Path, rounds: int) -> None:
    cat = RocksCatalog("bench", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        cat.create_namespace("bench")
        names = ["lat1", "lat10", "lat100"]
        for prefix in THROUGHPUT_PREFIXES:
            names.append(f"{prefix}_warmup")
            names += [f"{prefix}_{side}{r}" for r in range(rounds) for side in ("base", "stalled")]
        for name in names:
            cat.create_table(f"bench.{name}", ROWS.schema)
    finally:
        cat.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short development run")
    args = parser.parse_args()
    commits = 20 if args.quick else 100
    tp_commits, rounds = (30, 2) if args.quick else (150, 4)
    results: dict[str, Any] = {"quick": args.quick, "cpus": os.cpu_count(), "writer": "DoPut, 100 rows per commit"}
    # The machine may be shared: record how busy it was (1-minute load average).
    results["load_avg_start"] = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="icefloe-bench-feed-") as tmp:
        warehouse = Path(tmp) / "wh"
        prepare(warehouse, rounds)
        server = ServeProcess(warehouse)
        writer = Writer(server.location)
        # Python subscribers always; Go and Rust subscribers too when their toolchains are
        # here (one process each: arrival times without the Python clients' GIL queueing).
        clients = ["python"] + (["go"] if go_subscriber_binary() is not None else [])
        clients += ["rust"] if rust_subscriber_binary() is not None else []
        try:
            for n in (1, 10, 100):
                for client in clients:
                    row = measure_latency(writer, server.location, n, commits, gap_s=0.05, client=client)
                    results.setdefault(LATENCY_KEYS[client], []).append(row)
            results["throughput"] = {
                "stalled_subscribers": 20,
                **measure_throughput(
                    writer, lambda: open_stalled_processes(server.location, 20), "tp", tp_commits, rounds
                ),
            }
            # The same 20 never-reading feeds multiplexed on the writer's own connection (whose
            # options make the server's writes to them block at once), 50 ms heartbeats: the
            # writer's appends share the connection with whatever the server sends them.
            own = Writer(server.location, generic_options=STALLING_OPTIONS)
            try:
                results["throughput_own_connection"] = {
                    "stalled_subscribers": 20,
                    "heartbeat_ms": OWN_CONNECTION_HEARTBEAT_MS,
                    **measure_throughput(
                        own,
                        lambda: open_stalled_on(own.client, 20, OWN_CONNECTION_HEARTBEAT_MS),
                        "tp_own",
                        tp_commits,
                        rounds,
                    ),
                }
            finally:
                own.close()
        finally:
            writer.close()
            server.stop()

    results["load_avg_end"] = round(os.getloadavg()[0], 2)
    print(f"\nload average (1 min) at start / end: {results['load_avg_start']} / {results['load_avg_end']}")
    for client in clients:
        print(f"\ncommit -> subscriber latency, {client} subscribers ({commits} paced 100-row DoPut appends; ms)")
        header = ("subscribers", "events", "ack p50", "ack p99", "ack max", "last-sub p50", "commit p50",
                  "commit p99", "warm-up max")
        print(" ".join(f"{h:>12}" for h in header))
        for row in results[LATENCY_KEYS[client]]:
            keys = ("subscribers", "events", "ack_to_arrival_p50_ms", "ack_to_arrival_p99_ms",
                    "ack_to_arrival_max_ms", "ack_to_last_subscriber_p50_ms", "commit_to_arrival_p50_ms",
                    "commit_to_arrival_p99_ms", "warmup_ack_to_arrival_max_ms")
            print(" ".join(f"{row[k]:>12}" for k in keys))
    for key, title, target in (
        ("throughput", "20 subscribers that never read (own processes) vs none", 0.8),
        ("throughput_own_connection", "20 never-reading 50 ms-heartbeat feeds on the writer's connection vs none", 0.9),
    ):
        tp = results[key]
        print(f"\nwriter throughput, {title} ({tp['rounds']} rounds x {tp['commits_per_round']} appends)")
        print(f"  appends/s without: {tp['appends_per_s_without']}  median {tp['median_without']}")
        print(f"  appends/s with   : {tp['appends_per_s_with_stalled']}  median {tp['median_with_stalled']}")
        print(f"  ratio with/without: {tp['ratio']}  (target >= {target})")
    save_run("feed", results)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "subscriber":
        subscriber_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
    else:
        main()
