"""Change scan of the last 100 small appends vs the SELECT a client would otherwise write.

A table gets 1,000 appends of 10 rows each; every row carries its append's number in a
``batch`` column, which is what a client without change scans must add to find "what is new".
Same run, same server, same client, alternating:
- change scan: ``{"changes": "bench.events", "after": head - 100, "until": head}``
  (GetFlightInfo + every endpoint's DoGet);
- SELECT: ``SELECT * FROM bench.events WHERE batch >= 900`` over Flight SQL.
Both return the same 1,000 rows. Reported: each one's median latency, and change / SELECT.

Usage: python benchmarks/bench_change_scan.py [--appends 1000] [--rows 10] [--last 100] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def make_table(warehouse: Path) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("bench", warehouse=str(warehouse))
    try:
        cat.create_namespace("bench")
        # No background compaction: once compacted, the small files of old appends live only
        # as long as the table's snapshot retention (10 min / 100 snapshots by default), and
        # this measures the read path, not retention.
        cat.create_table("bench.events", pa.schema([("id", pa.int64()), ("batch", pa.int64()), ("v", pa.string())]),
                         properties={"icefloe.compaction.auto": "false"})
    finally:
        cat.close()


def append_all(location: str, appends: int, rows: int) -> int:
    client = flight.FlightClient(location)
    seq = 0
    try:
        for batch in range(appends):
            data = pa.table({
                "id": pa.array(range(batch * rows, (batch + 1) * rows), pa.int64()),
                "batch": pa.array([batch] * rows, pa.int64()),
                "v": [f"row-{batch}-{i}" for i in range(rows)],
            })
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("bench", "events"), data.schema)
            writer.write_table(data)
            writer.done_writing()
            seq = int(json.loads(reader.read().to_pybytes())["commit_seq"])
            writer.close()
    finally:
        client.close()
    return seq


def read_all(client: flight.FlightClient, descriptor: flight.FlightDescriptor) -> int:
    info = client.get_flight_info(descriptor)
    return sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--last", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-changes-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        make_table(warehouse)
        server = ServerProcess(warehouse).start()
        try:
            started = time.perf_counter()
            head = append_all(server.location, args.appends, args.rows)
            append_s = time.perf_counter() - started
            changes = flight.FlightDescriptor.for_command(json.dumps(
                {"changes": "bench.events", "after": head - args.last, "until": head}).encode())
            first_batch = args.appends - args.last
            select = flight.FlightDescriptor.for_command(protocol.CommandStatementQuery(
                query=f"SELECT * FROM bench.events WHERE batch >= {first_batch}").pack())
            client = flight.FlightClient(server.location)
            expected = args.last * args.rows
            timings: dict[str, list[float]] = {"change scan": [], "SELECT with filter": []}
            for name, descriptor in (("change scan", changes), ("SELECT with filter", select)):  # warm-up
                assert read_all(client, descriptor) == expected, name
            for round_no in range(args.rounds):
                order = list(timings.items()) if round_no % 2 == 0 else list(reversed(timings.items()))
                for name, samples in order:
                    descriptor = changes if name == "change scan" else select
                    t0 = time.perf_counter()
                    rows = read_all(client, descriptor)
                    samples.append(time.perf_counter() - t0)
                    assert rows == expected, (name, rows)
            client.close()
        finally:
            server.stop()
    medians = {name: statistics.median(samples) * 1000 for name, samples in timings.items()}
    ratio = medians["change scan"] / medians["SELECT with filter"]
    load = os.getloadavg()[0]
    print(f"{args.appends} appends of {args.rows} rows in {append_s:.1f} s; last {args.last} appends; "
          f"load {load:.2f}")
    print(f"{'read':<22}{'median ms':>12}")
    for name, ms in medians.items():
        print(f"{name:<22}{ms:>12.2f}")
    print(f"change scan / SELECT: {ratio:.2f}x")
    result: dict[str, Any] = {
        "appends": args.appends, "rows_per_append": args.rows, "last": args.last, "rounds": args.rounds,
        "median_ms": medians, "ratio_change_over_select": ratio, "load_average": load,
    }
    save_run("change_scan", result)


if __name__ == "__main__":
    main()
