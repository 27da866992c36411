"""The fan-out that writes live commits to caught-up streams: order, stalls, falling behind.

These drive ``FanOut`` over a real catalog with streams that record what they are handed (a
stand-in for the gRPC writer, so a test can make one block like a client that stopped
reading). The end-to-end behaviour through real Flight clients is in the other feed tests.
"""

from __future__ import annotations

import time

from feed_helpers import SCHEMA, RecordingStream, attach_stuck, stalled_and_live, wait_until

from catalog import RocksCatalog
from catalog.commit_log import CommitRecord
from flight_server.feed.fanout import FanOut
from flight_server.server import IcefloeServer


def test_attached_streams_get_every_commit_once_in_order(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=2)
    try:
        head = catalog.log.head()
        streams = [RecordingStream() for _ in range(20)]
        sinks = [fanout.attach(s, head, on_stall=lambda: None) for s in streams]
        assert all(sinks)
        for i in range(30):
            catalog.create_table(f"ns.t{i}", SCHEMA)
        want = list(range(head + 1, head + 31))
        for stream in streams:
            wait_until(lambda stream=stream: len(stream.seqs) >= 30)
            assert stream.seqs == want
        assert fanout.stalls == 0
    finally:
        fanout.close()


def test_attach_behind_head_delivers_the_kept_records_first(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=1)
    try:
        start = catalog.log.head()
        for i in range(5):
            catalog.create_table(f"ns.t{i}", SCHEMA)
        stream = RecordingStream()
        assert fanout.attach(stream, start + 2, on_stall=lambda: None) is not None
        catalog.create_table("ns.later", SCHEMA)
        wait_until(lambda: len(stream.seqs) >= 4)
        assert stream.seqs == list(range(start + 3, start + 7))
    finally:
        fanout.close()


def test_a_stalled_write_is_handed_back_and_others_keep_receiving(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=1, stall_s=0.05)
    try:
        head = catalog.log.head()
        stall_calls: list[bool] = []
        stalled, stalled_sink = attach_stuck(fanout, head, on_stall=lambda: stall_calls.append(True))
        healthy = RecordingStream()
        assert fanout.attach(healthy, head, on_stall=lambda: None) is not None
        catalog.create_table("ns.first", SCHEMA)
        assert stalled.blocked.wait(10)
        # With its only worker stuck, the pool gets a replacement and the healthy stream is
        # served; the stalled one is detached but stays busy until its write returns.
        for i in range(5):
            catalog.create_table(f"ns.t{i}", SCHEMA)
        wait_until(lambda: len(healthy.seqs) >= 6)
        assert healthy.seqs == list(range(head + 1, head + 7))
        assert fanout.stalls == 1 and stall_calls == [True]
        assert not stalled_sink.attached and not stalled_sink.released.is_set()
        stalled.gate.set()  # the client reads again: the write returns
        assert stalled_sink.released.wait(10)
        # It delivered exactly the record it was writing; its handler resumes after it.
        assert stalled.seqs == [head + 1] and stalled_sink.last_seq == head + 1
        assert fanout.attached_count == 1
    finally:
        stalled.gate.set()
        fanout.close()


def test_a_stream_that_falls_out_of_the_kept_records_is_handed_back(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=1, stall_s=30.0, ring_size=4)
    try:
        head = catalog.log.head()
        slow = RecordingStream(delay_s=0.3)
        sink = fanout.attach(slow, head, on_stall=lambda: None)
        assert sink is not None
        for i in range(10):
            catalog.create_table(f"ns.t{i}", SCHEMA)
        assert sink.released.wait(10)
        assert sink.error is None and not sink.stalled
        # What it was handed is a contiguous prefix; the rest is for its handler to read
        # from the log after ``last_seq``.
        assert slow.seqs == list(range(head + 1, sink.last_seq + 1))
        assert sink.last_seq < head + 10
        assert fanout.attach(RecordingStream(), head, on_stall=lambda: None) is None
    finally:
        fanout.close()


def test_heartbeats_and_detach(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=1)
    try:
        head = catalog.log.head()
        stream = RecordingStream()
        sink = fanout.attach(stream, head, on_stall=lambda: None, heartbeat_s=0.05)
        assert sink is not None
        wait_until(lambda: len(stream.heartbeats) >= 2)
        assert set(stream.heartbeats) == {head}
        fanout.detach(sink)
        assert sink.released.is_set() and fanout.attached_count == 0
        catalog.create_table("ns.after_detach", SCHEMA)
        time.sleep(0.1)
        assert stream.seqs == []
    finally:
        fanout.close()


def test_stalled_client_is_reattached_after_catching_up(feed_server: IcefloeServer, location: str) -> None:
    """End to end: a client that stops reading leaves the fan-out, catches up with no gap,
    gets heartbeats again, and rejoins."""
    cat = feed_server.catalog
    fanout = feed_server.feed.fanout
    cat.create_namespace("ns")
    stalled, live = stalled_and_live(location, heartbeat_ms=50)
    try:
        wait_until(lambda: fanout.attached_count == 2)
        n = 0
        while fanout.stalls == 0:
            assert n < 1000, "the stalled client's writes never blocked"
            cat.create_table(f"ns.t{n}", SCHEMA)
            n += 1
        assert fanout.attached_count == 1
        # More commits, and idle time with heartbeats due, while it still does not read.
        for i in range(20):
            cat.create_table(f"ns.more{i}", SCHEMA)
        n += 20
        time.sleep(0.5)
        stalled.resume()
        assert [e["seq"] for e in stalled.events(n)] == list(range(1, n + 1))
        assert [e["seq"] for e in live.events(n)] == list(range(1, n + 1))
        # Caught up, it gets heartbeats again (reporting the head it has covered) on its own
        # thread, then back with the workers once its handler has tailed the log for a while.
        for _ in range(3):
            assert stalled.wait_for("heartbeat").metadata == {"heartbeat": {"head": n}}
        wait_until(lambda: fanout.attached_count == 2)
        for _ in range(3):
            assert stalled.wait_for("heartbeat").metadata == {"heartbeat": {"head": n}}
        cat.create_table("ns.after", SCHEMA)
        assert [e["seq"] for e in stalled.events(1)] == [n + 1]
        assert [e["seq"] for e in live.events(1)] == [n + 1]
    finally:
        stalled.close()
        live.close()


def test_a_failed_write_hands_the_stream_back_with_its_error(catalog: RocksCatalog) -> None:
    class FailingStream(RecordingStream):
        def deliver(self, records: list[CommitRecord], heartbeat: bool, head: int) -> bool:
            raise RuntimeError("client went away")

    fanout = FanOut(catalog.hub, workers=1)
    try:
        failing, healthy = FailingStream(), RecordingStream()
        head = catalog.log.head()
        failing_sink = fanout.attach(failing, head, on_stall=lambda: None)
        assert failing_sink is not None and fanout.attach(healthy, head, on_stall=lambda: None) is not None
        catalog.create_table("ns.t", SCHEMA)
        catalog.create_table("ns.u", SCHEMA)
        assert failing_sink.released.wait(10)
        assert isinstance(failing_sink.error, RuntimeError) and not failing_sink.attached
        wait_until(lambda: healthy.seqs == [head + 1, head + 2])
        assert fanout.attached_count == 1
    finally:
        fanout.close()
