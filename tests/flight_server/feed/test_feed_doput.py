"""The feed under real DoPut writers (group commit included) against a server process, on a
local warehouse and on S3."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from doput_client import do_put as put
from feed_helpers import FeedReader
from storage_kinds import ON_EVERY_STORAGE, Warehouse, open_catalog, start_server

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def make_tables(warehouse: Warehouse, names: list[str]) -> None:
    cat = open_catalog(warehouse, "setup")
    try:
        cat.create_namespace("ns")
        for name in names:
            cat.create_table(name, SCHEMA)
    finally:
        cat.close()


def do_put(location: str, table: str, data: pa.Table) -> dict[str, Any]:
    return put(location, tuple(table.split(".")), data)


def batch(writer: int, k: int, n: int = 3) -> pa.Table:
    ids = [writer * 1_000_000 + k * 100 + i for i in range(n)]
    return pa.table({"id": ids, "v": [f"w{writer}" for _ in ids]}, schema=SCHEMA)


@ON_EVERY_STORAGE
def test_doput_writers_and_subscribers(warehouse: Warehouse) -> None:
    make_tables(warehouse, ["ns.t0", "ns.t1", "ns.t2"])  # seqs 1..3
    server = start_server(warehouse).start()
    loc = server.location
    everything = FeedReader(loc, {"feed": "commits.v1", "after": "earliest"})
    only_t0 = FeedReader(loc, {"feed": "commits.v1", "after": 0, "tables": ["ns.t0"]})
    rows_t1 = FeedReader(loc, {"feed": "rows.v1", "after": 0, "tables": ["ns.t1"]})
    results: list[tuple[str, int, dict[str, Any]]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    # Two writers per table for t0 and t1 (their appends may share a group commit), one for t2.
    plan = [(0, "ns.t0"), (1, "ns.t0"), (2, "ns.t1"), (3, "ns.t1"), (4, "ns.t2")]
    puts_each = 8

    def write(writer: int, table: str) -> None:
        try:
            for k in range(puts_each):
                result = do_put(loc, table, batch(writer, k))
                with lock:
                    results.append((table, writer, result))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=args) for args in plan]
    late: FeedReader | None = None
    try:
        for t in threads:
            t.start()
        late = FeedReader(loc, {"feed": "commits.v1", "after": "latest"})
        late_start = late.wait_for("hello").metadata["hello"]["head"]  # type: ignore[index]
        for t in threads:
            t.join(120)
        assert not failures, failures
        assert len(results) == len(plan) * puts_each
        head = max(r["commit_seq"] for _, _, r in results)
        events = everything.events(head)
        assert [e["seq"] for e in events] == list(range(1, head + 1))
        by_seq = {e["seq"]: e for e in events}
        for table, _, result in results:
            event = by_seq[result["commit_seq"]]
            assert f"{event['namespace']}.{event['table']}" == table == result["table"]
            assert event["operation"] == "append" and event["snapshot_id"] == result["snapshot_id"]
        # Rows per table: the events' added_rows add up to what the writers sent.
        for table in ("ns.t0", "ns.t1", "ns.t2"):
            sent = sum(r["rows"] for t, _, r in results if t == table)
            logged = sum(
                e["added_rows"] or 0
                for e in events
                if f"{e['namespace']}.{e['table']}" == table and e["operation"] == "append"
            )
            assert sent == logged
        t0_seqs = [e["seq"] for e in events if e["table"] == "t0"]
        assert [e["seq"] for e in only_t0.events(len(t0_seqs))] == t0_seqs
        want_late = list(range(late_start + 1, head + 1))
        assert [e["seq"] for e in late.events(len(want_late))] == want_late
        # rows.v1: every row DoPut sent to ns.t1, exactly once, tagged with its commit's seq.
        t1_results = [r for t, _, r in results if t == "ns.t1"]
        want_rows = sum(r["rows"] for r in t1_results)
        got: list[dict[str, Any]] = []
        while len(got) < want_rows:
            msg = rows_t1.next(timeout=30)
            if msg.batch is not None:
                got.extend(msg.batch.to_pylist())
        sent_ids = sorted(
            i for w in (2, 3) for k in range(puts_each) for i in batch(w, k).column("id").to_pylist()
        )
        assert sorted(r["id"] for r in got) == sent_ids
        assert {r["_seq"] for r in got} == {r["commit_seq"] for r in t1_results}
        assert {r["_operation"] for r in got} == {"append"}
        # Maintenance commits are events too (t0 got 16 small files: compaction rewrites them).
        client = flight.FlightClient(loc)
        try:
            list(client.do_action(flight.Action("icefloe.maintain", json.dumps({"table": "ns.t0"}).encode())))
        finally:
            client.close()
        # (The background maintainer may also compact t1 meanwhile; look for t0's commit.)
        deadline = time.monotonic() + 30
        later: list[dict[str, Any]] = []
        while not any(e["table"] == "t0" for e in later):
            assert time.monotonic() < deadline, later
            later.extend(everything.events(1))
        assert all(e["seq"] > head for e in later)
        assert next(e for e in later if e["table"] == "t0")["operation"] in ("replace", "expire")
    finally:
        for reader in (everything, only_t0, rows_t1, late):
            if reader is not None:
                reader.close()
        server.stop()
    assert "Traceback" not in server.log, server.log
