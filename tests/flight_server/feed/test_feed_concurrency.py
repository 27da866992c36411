"""The replay/live seam under concurrent writers, and subscribers that stop reading."""

from __future__ import annotations

import threading
import time

from feed_helpers import SCHEMA, STALLING_CLIENT_OPTIONS, FeedReader, rows, stalled_and_live

from catalog import RocksCatalog
from flight_server.server import IcefloeServer


def run_writers(cat: RocksCatalog, writers: int, commits: int, prefix: str = "w") -> list[BaseException]:
    """``writers`` threads, each making ``commits`` commits to its own table; returns errors."""
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            table = cat.create_table(f"ns.{prefix}{i}", SCHEMA)
            for k in range(commits - 1):
                if k % 2:
                    with table.transaction() as tx:
                        tx.set_properties(step=str(k))
                else:
                    table.append(rows(k, 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a writer did not finish"
    return errors


def matching(cat: RocksCatalog, after: int, tables: set[str] | None = None) -> list[int]:
    return [
        r.seq for r in cat.log.read(after) if tables is None or f"{'.'.join(r.namespace)}.{r.table}" in tables
    ]


def test_seam_under_concurrent_writers(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    writers, commits = 4, 8
    early = FeedReader(location, {"feed": "commits.v1", "after": "earliest"})
    filtered = FeedReader(location, {"feed": "commits.v1", "after": 0, "tables": ["ns.w1", "ns.w3"]})
    late: list[tuple[int, FeedReader]] = []
    stop_joining = threading.Event()

    def join_while_writing() -> None:
        # Subscribers that arrive mid-stream: their replay overlaps live commits.
        while not stop_joining.is_set() and len(late) < 4:
            head = cat.log.head()
            late.append((head, FeedReader(location, {"feed": "commits.v1", "after": head})))
            reader = FeedReader(location, {"feed": "commits.v1", "after": "latest"})
            hello = reader.wait_for("hello").metadata
            assert hello is not None
            late.append((hello["hello"]["head"], reader))
            time.sleep(0.05)

    joiner = threading.Thread(target=join_while_writing)
    joiner.start()
    try:
        assert run_writers(cat, writers, commits) == []
        stop_joining.set()
        joiner.join(30)
        total = cat.log.head()
        assert total == writers * commits  # namespaces are not table commits
        got_all = [e["seq"] for e in early.events(total)]
        assert got_all == list(range(1, total + 1))
        want = matching(cat, 0, {"ns.w1", "ns.w3"})
        assert [e["seq"] for e in filtered.events(len(want))] == want
        assert late, "no subscriber joined while writers ran"
        for start, reader in late:
            want = list(range(start + 1, total + 1))
            assert [e["seq"] for e in reader.events(len(want))] == want
        # Nothing beyond: a heartbeat-only tail (no duplicates arrive later).
        cat.create_namespace("done")
        cat.create_table("done.t", SCHEMA)
        assert [e["seq"] for e in early.events(1)] == [total + 1]
    finally:
        stop_joining.set()
        joiner.join(30)
        for reader in [early, filtered, *(r for _, r in late)]:
            reader.close()


def test_subscriber_that_stops_reading_does_not_block_writers(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.hub.queue_size = 4  # so the stalled subscriber overflows after a few commits
    cat.create_namespace("ns")
    stalled, live = stalled_and_live(location)
    try:
        deadline = time.monotonic() + 10
        while cat.hub.subscriber_count < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        writers, commits = 3, 10
        # Writes to the stalled client block once gRPC's buffers are full; writers must not
        # notice. Rounds go on until the server has handed that stream back to catch up
        # from the log later (how many events the buffers take varies).
        for round_ in range(20):
            assert run_writers(cat, writers, commits, prefix=f"r{round_}w") == []
            if any(s.lagging or s.catch_ups for s in cat.hub.subscriptions()):
                break
        else:
            raise AssertionError("the stalled subscriber never fell behind")
        total = cat.log.head()
        assert [e["seq"] for e in live.events(total)] == list(range(1, total + 1))
        # It starts reading again and catches up from the log: complete and in order.
        stalled.resume()
        assert stalled.wait_for("hello").metadata == {"hello": {"log_start": 1, "head": 0}}
        assert [e["seq"] for e in stalled.events(total)] == list(range(1, total + 1))
        cat.create_table("ns.after", SCHEMA)
        assert [e["seq"] for e in stalled.events(1)] == [total + 1]
        assert [e["seq"] for e in live.events(1)] == [total + 1]
    finally:
        stalled.close()
        live.close()


def test_lagging_subscriber_whose_cursor_is_trimmed_gets_cursor_expired(
    feed_server: IcefloeServer, location: str
) -> None:
    cat = feed_server.catalog
    cat.hub.queue_size = 2
    cat.create_namespace("ns")
    request = {"feed": "commits.v1", "after": "latest"}
    stalled = FeedReader(location, request, generic_options=STALLING_CLIENT_OPTIONS, read=False)
    try:
        deadline = time.monotonic() + 10
        while cat.hub.subscriber_count < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # Commit until the server's write to the stalled client blocks and the stream is
        # handed back to catch up from the log (gRPC buffers the first few events).
        for i in range(1000):
            cat.create_table(f"ns.t{i}", SCHEMA)
            if any(s.lagging for s in cat.hub.subscriptions()):
                break
        else:
            raise AssertionError("the stalled subscriber never fell behind")
        for i in range(3):
            cat.create_table(f"ns.more{i}", SCHEMA)
        head = cat.log.head()
        # Retention drops records the stalled subscriber has not read yet.
        assert cat.log.trim(head - 1) == head
        stalled.resume()
        seqs: list[int] = []
        while True:
            try:
                msg = stalled.next()
            except BaseException as exc:  # the stream's end
                error = exc
                break
            if msg.batch is not None:
                seqs.extend(msg.batch.column(0).to_pylist())
        # Whatever was already in flight arrives in order; then an error, never a silent skip.
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) < head - 1
        assert f"cursor expired: log starts at {head}" in str(error)
    finally:
        stalled.close()
