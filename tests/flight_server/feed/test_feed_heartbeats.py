"""Heartbeats of attached streams come from the fan-out's one timer, and never pile up.

The fan-out tests drive ``FanOut`` with streams that record what they are handed (so one can
block like a client that stopped reading); the others go through a real server and real
pyarrow.flight clients.
"""

from __future__ import annotations

import threading
import time

from feed_helpers import SCHEMA, FeedReader, RecordingStream, attach_stuck, wait_until

from catalog import RocksCatalog
from flight_server.feed.fanout import FanOut
from flight_server.server import IcefloeServer


def _feed_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("icefloe-feed"))


def test_many_streams_get_heartbeats_from_one_timer(catalog: RocksCatalog) -> None:
    fanout = FanOut(catalog.hub, workers=2)
    try:
        head = catalog.log.head()
        streams = [RecordingStream() for _ in range(50)]
        for stream in streams:
            assert fanout.attach(stream, head, on_stall=lambda: None, heartbeat_s=0.05) is not None
        for stream in streams:
            wait_until(lambda stream=stream: len(stream.heartbeats) >= 3)
            assert set(stream.heartbeats) == {head}
        # 50 streams: two workers and one timer, no thread per stream.
        assert _feed_threads() == ["icefloe-feed-fanout"] * 2 + ["icefloe-feed-timer"]
        # A commit resets a stream's interval: the heartbeat after it reports the new head.
        catalog.create_table("ns.t", SCHEMA)
        for stream in streams:
            wait_until(lambda stream=stream: stream.heartbeats[-1] == head + 1)
            assert stream.seqs == [head + 1]
    finally:
        fanout.close()


def test_no_heartbeat_is_queued_while_a_write_has_not_returned(catalog: RocksCatalog) -> None:
    # stall_s is long, so the blocked stream stays attached while its write is stuck.
    fanout = FanOut(catalog.hub, workers=1, stall_s=30.0)
    try:
        head = catalog.log.head()
        stuck, sink = attach_stuck(fanout, head, heartbeat_s=0.05)
        assert stuck.blocked.wait(10)  # its first heartbeat's write blocks ...
        time.sleep(0.5)  # ... for ten heartbeat intervals
        stuck.gate.set()
        wait_until(lambda: len(stuck.heartbeats) >= 3)
        (_, first_returned), (second_started, _) = stuck.heartbeat_times[:2]
        # Nothing was queued behind the blocked write: the next heartbeat came an interval
        # after it returned, not at once (and not ten of them).
        assert second_started - first_returned >= 0.045
        assert sink.attached and fanout.stalls == 0
    finally:
        stuck.gate.set()
        fanout.close()


def test_heartbeats_continue_for_many_streams_and_cancels_are_noticed(
    feed_server: IcefloeServer, location: str
) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    request = {"feed": "commits.v1", "after": "latest", "tables": ["other.*"], "heartbeat_ms": 50}
    readers = [FeedReader(location, request) for _ in range(30)]
    try:
        for reader in readers:
            reader.wait_for("hello")
        wait_until(lambda: feed_server.feed.fanout.attached_count == 30)
        for _ in range(3):
            for reader in readers:
                assert reader.wait_for("heartbeat").metadata == {"heartbeat": {"head": 1}}
        assert _feed_threads().count("icefloe-feed-timer") == 1
        # A client that cancels while attached (nothing written to it meanwhile would fail)
        # ends its stream on the server: the timer notices and lets its handler return.
        for reader in readers[:10]:
            reader.close()
        wait_until(lambda: cat.hub.subscriber_count == 20)
        assert feed_server.feed.fanout.attached_count == 20
        for reader in readers[10:]:
            assert reader.wait_for("heartbeat").metadata == {"heartbeat": {"head": 1}}
    finally:
        for reader in readers:
            reader.close()
