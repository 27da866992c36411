"""What streams cost the server while nothing happens: no thread may busy-wait."""

from __future__ import annotations

import time

from feed_helpers import SCHEMA, STALLING_CLIENT_OPTIONS, FeedReader, rows, wait_until

from flight_server.server import IcefloeServer


def _process_cpu_s(seconds: float) -> float:
    """CPU time this process (server and test clients alike) uses over ``seconds``."""
    start = time.process_time()
    time.sleep(seconds)
    return time.process_time() - start


def test_streams_with_a_stalled_client_do_not_spin(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    request = {"feed": "commits.v1", "after": "latest", "heartbeat_ms": 50}
    stalled = [FeedReader(location, request, generic_options=STALLING_CLIENT_OPTIONS, read=False) for _ in range(8)]
    live = FeedReader(location, request)
    try:
        live.wait_for("hello")
        wait_until(lambda: cat.hub.subscriber_count == 9)
        fanout = feed_server.feed.fanout
        assert fanout is not None
        # Commit until the stalled clients' writes block (gRPC buffers the first few events),
        # and then some more, so that their buffers stay full.
        for i in range(200):
            table.append(rows(i, 1))
            if fanout.stalls >= 8:
                break
        else:
            raise AssertionError("the stalled clients' writes never blocked")
        for i in range(200, 230):
            table.append(rows(i, 1))
        live.events(len([r for r in cat.log.read(0) if r.table == "t" and r.operation == "append"]))
        # Idle now, but for heartbeats every 50 ms: a second of it is a few ms of CPU; a
        # thread that busy-waits for a heartbeat it cannot send burns the whole second.
        used = _process_cpu_s(1.0)
        assert used < 0.2, f"{used:.2f} s of CPU in 1 s idle"
        assert live.wait_for("heartbeat").metadata is not None
    finally:
        for reader in [*stalled, live]:
            reader.close()
