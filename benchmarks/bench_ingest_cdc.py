"""Postgres CDC end-to-end lag: source commit -> the Iceberg commit holding it seen on the feed.

Part of ``bench_ingest`` (``python benchmarks/bench_ingest.py --cdc``). A real PostgreSQL cluster
(scripts/postgres-server) and a real server; a postgres connector (poll 50 ms) follows one table.
Eight writer connections (threads, keys of their own) together commit single-change transactions
at ``--rate`` changes/s (60% inserts, 30% updates, 10% deletes) for ``--seconds`` (the rate they
reach is reported: on a loaded machine it can fall short), noting for each its wall-clock commit
time and the WAL insert LSN right after it (>= the transaction's commit end LSN). A ``commits.v1`` feed subscriber notes
when each Iceberg commit of the target arrives. Afterwards each commit's checkpoint LSN is read
from its snapshot summary; a source transaction's lag = arrival of the first commit whose
checkpoint LSN >= its LSN, minus its commit time. p50 / p99 per round; the median of the rounds.
With ``--cdc-tables 2`` the connector replicates two tables through one slot, and every source
transaction makes the same change in both (``rate`` counts row changes: half as many
transactions); each batch lands in both targets in one catalog commit.
(The LSN noted can exceed the transaction's own end LSN when other WAL is written in between:
then its lag counts one commit late - an overestimate, never an underestimate.)
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from postgres_support import PostgresServer  # noqa: E402
from servers import ServerProcess  # noqa: E402


def _lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def _follow(location: str, arrivals: list[tuple[int, float]], ready: threading.Event, stop: threading.Event) -> None:
    request = json.dumps({"feed": "commits.v1", "after": "latest", "tables": ["bench.*"]}).encode()
    client = flight.FlightClient(location)
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(request))
    writer.done_writing()
    reader.read_chunk()  # hello
    ready.set()
    while not stop.is_set():
        try:
            chunk = reader.read_chunk()
        except (StopIteration, flight.FlightError, pa.ArrowException):
            return
        now = time.time()
        if chunk.data is not None:
            for snapshot_id, table in zip(chunk.data.column("snapshot_id").to_pylist(),
                                          chunk.data.column("table").to_pylist(), strict=True):
                if table in ("cdc", "cdc_b") and snapshot_id is not None:
                    arrivals.append((snapshot_id, now))


def _write(pg: PostgresServer, tables: list[str], rate: float, seconds: float, rng: random.Random, writers: int
           ) -> list[tuple[float, int]]:
    """Single-change transactions at ``rate``/s in all from ``writers`` connections (threads, each
    on keys of its own: one connection's round trips cannot reach 1,000/s on a loaded machine):
    (commit wall time, WAL insert LSN after it), in commit order."""
    done: list[tuple[float, int]] = []
    lock = threading.Lock()
    seeds = [rng.randrange(1 << 30) for _ in range(writers)]

    def one(index: int) -> None:
        own = random.Random(seeds[index])
        live: list[int] = []
        next_id = index + 1
        mine: list[tuple[float, int]] = []
        with pg.connect() as conn:
            start = time.perf_counter()
            share = rate / writers / len(tables)  # transactions/s of this writer
            for i in range(int(share * seconds)):
                pause = start + i / share - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                roll = own.random()
                with conn.transaction():  # one source transaction: the same change in every table
                    if roll < 0.6 or len(live) < 10:
                        for table in tables:
                            conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (next_id, f"v{i}"))
                        live.append(next_id)
                        next_id += writers
                    elif roll < 0.9:
                        key = own.choice(live)
                        for table in tables:
                            conn.execute(f"UPDATE {table} SET name = %s WHERE id = %s", (f"u{i}", key))
                    else:
                        key = live.pop(own.randrange(len(live)))
                        for table in tables:
                            conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                committed = time.time()
                row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                assert row is not None
                mine.append((committed, _lsn(row[0])))
        with lock:
            done.extend(mine)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(done)


def run_round(tmp: Path, pg: PostgresServer, rate: float, seconds: float, round_no: int, writers: int = 8,
              tables: int = 1) -> dict[str, Any]:
    table, publication, slot = pg.names()
    sources = [table, table + "_b"][:tables]
    targets = ["cdc", "cdc_b"][:tables]
    for name in sources:
        pg.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, name TEXT)")
    pg.execute(f"CREATE PUBLICATION {publication} FOR TABLE {', '.join(sources)}")
    warehouse = tmp / f"warehouse-{round_no}"
    proc = ServerProcess(warehouse).start()
    arrivals: list[tuple[int, float]] = []
    ready, stop = threading.Event(), threading.Event()
    try:
        from bench_ingest import action, sql

        sql(proc, "CREATE SCHEMA bench")
        for target in targets:
            sql(proc, f"CREATE TABLE bench.{target} (id BIGINT, name VARCHAR)")
        # Every snapshot kept: a commit's checkpoint is read back from its snapshot afterwards,
        # and with the default retention (the newest 100) the earlier commits' checkpoints were
        # gone, so their transactions were matched to a much later commit (lag overstated by
        # tens of seconds in runs before 2026-12-05 07:20). (0 would mean "keep all" at commit
        # time but "keep 1" to background maintenance.)
        for target in targets:
            sql(proc, f"ALTER TABLE bench.{target} SET (\"icefloe.snapshots.retain\" = '1000000', "
                      "\"history.expire.max-snapshot-age-ms\" = '86400000')")
        follower = threading.Thread(target=_follow, args=(proc.location, arrivals, ready, stop), daemon=True)
        follower.start()
        ready.wait(60)
        options: dict[str, Any] = {"dsn": pg.dsn, "table": table, "publication": publication, "slot": slot}
        if tables > 1:
            options.pop("table")
            options["tables"] = {f"public.{s}": f"bench.{t}" for s, t in zip(sources, targets, strict=True)}
        action(proc, "icefloe.ingest.add", {"name": "cdc", "table": "bench.cdc", "source": "postgres",
                                            "options": options, "poll_s": 0.05})
        # The lag of a running connector, not of its start: the slot exists and a pass ran.
        deadline = time.time() + 60
        while action(proc, "icefloe.ingest.status", {"name": "cdc"})["passes"] < 1 and time.time() < deadline:
            time.sleep(0.1)
        began = time.perf_counter()
        written = _write(pg, sources, rate, seconds, random.Random(round_no), writers)
        write_s = time.perf_counter() - began  # the writer may not keep the rate on a loaded machine
        source_rows = [tuple(r) for s in sources for r in pg.execute(f"SELECT id, name FROM {s} ORDER BY id")]
        deadline = time.time() + 600
        while True:
            target_rows = [tuple(r) for t in targets
                           for r in sql_rows(proc, f"SELECT id, name FROM bench.{t} ORDER BY id")]
            if target_rows == source_rows:
                break
            if time.time() > deadline:
                status = action(proc, "icefloe.ingest.status", {"name": "cdc"})
                raise RuntimeError(f"the target did not catch up with the source in 600 s: {len(target_rows)} vs "
                                   f"{len(source_rows)} rows; {status}")
            time.sleep(0.5)
        time.sleep(1.0)  # the last feed events
    finally:
        stop.set()
        proc.stop()
        pg.drop_slot(slot)
        pg.execute(f"DROP PUBLICATION {publication}", *(f"DROP TABLE {s}" for s in sources))
    from catalog import RocksCatalog

    catalog = RocksCatalog("bench", warehouse=str(warehouse))
    try:
        checkpoints = {}
        snapshots = [s for t in targets for s in catalog.load_table(("bench", t)).metadata.snapshots]
        for snapshot in snapshots:
            props = snapshot.summary.additional_properties if snapshot.summary else {}
            raw = props.get("icefloe.ingest.cdc.checkpoint")
            if raw:
                position = json.loads(raw)[""]
                if position.startswith("wal:"):
                    checkpoints[snapshot.snapshot_id] = int(position[4:20], 16)
    finally:
        catalog.close()
    seen = sorted((t, checkpoints[s]) for s, t in arrivals if s in checkpoints)
    if len(seen) < len(checkpoints):
        raise RuntimeError(f"{len(checkpoints) - len(seen)} of {len(checkpoints)} commits were not seen on the feed")
    lags = []
    for committed, lsn in written:
        arrival = next((t for t, c in seen if c >= lsn), None)
        if arrival is not None:
            lags.append(arrival - committed)
    lags.sort()
    if not lags:
        raise RuntimeError(f"no lag measured: {len(arrivals)} feed events, {len(checkpoints)} checkpoints")
    return {"changes": len(written) * tables, "transactions": len(written), "tables": tables,
            "measured": len(lags), "commits": len(seen),
            "p50_ms": 1000 * lags[len(lags) // 2], "p99_ms": 1000 * lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "rate": rate, "seconds": seconds, "achieved_rate": round(len(written) * tables / write_s, 1)}


def sql_rows(proc: ServerProcess, statement: str) -> list[Any]:
    import adbc_driver_flightsql.dbapi as dbapi

    with dbapi.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)
        return cur.fetchall()


def run(tmp: Path, rounds: int, rate: float, seconds: float, tables: int = 1) -> dict[str, Any]:
    pg = PostgresServer(tmp / "postgres").start()
    try:
        results = []
        for round_no in range(rounds):
            result = run_round(tmp, pg, rate, seconds, round_no, tables=tables)
            results.append(result)
            print(f"cdc round {round_no + 1}: {result['changes']} changes in {result['commits']} commits, lag p50 "
                  f"{result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms (the source wrote "
                  f"{result['achieved_rate']:.0f} changes/s)", flush=True)
    finally:
        pg.stop()
        if pg.data is not None and not pg.data.is_relative_to(pg.root):
            shutil.rmtree(pg.data.parent, ignore_errors=True)  # the cluster's own folder (scripts/postgres-server)
    return {"rounds": results, "median_p50_ms": statistics.median(r["p50_ms"] for r in results),
            "median_achieved_rate": statistics.median(r["achieved_rate"] for r in results),
            "median_p99_ms": statistics.median(r["p99_ms"] for r in results), "rate": rate, "seconds": seconds,
            "tables": tables}
