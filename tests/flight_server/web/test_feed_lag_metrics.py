"""Live feed delivery lag and replay lag are kept apart (issue 39, item 9).

``icefloe_feed_delivery_lag_seconds`` is what an alert watches: commit to write for events
published to a stream as they land. A subscriber replaying history from ``after`` (or catching
up from the log) delivers commits that are old by design; before, one such catch-up put a 24 s
observation into the live histogram. Replays now go to ``icefloe_feed_replay_lag_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.doput_client import do_put
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.ops_support import ops_url, scrape, value
from tests.flight_server.web.test_ops_metrics import city_rows
from tests.servers import serving

LIVE = "icefloe_feed_delivery_lag_seconds"
REPLAY = "icefloe_feed_replay_lag_seconds"
AGE_S = 2.0
Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _scrape_until(base: str, done: Callable[[Metrics], bool]) -> Metrics:
    deadline = time.monotonic() + 10
    while True:
        metrics = scrape(base)
        if done(metrics):
            return metrics
        assert time.monotonic() < deadline, "the delivery was never counted"
        time.sleep(0.05)


def test_a_replay_from_the_log_is_not_live_lag(tmp_path: Path) -> None:
    with serving(tmp_path / "wh", ["--metrics-port", "0", "--demo"]) as server:
        base = ops_url(server)
        for i in range(3):
            do_put(server.location, ("demo", "cities"), city_rows(1, first_id=2000 + i))
        time.sleep(AGE_S)  # the history is now at least this old
        before = scrape(base)
        with FeedReader(server.location, {"feed": "commits.v1", "after": "earliest", "heartbeat_ms": 200}) as feed:
            history = feed.events(7)  # the demo's 4 commits and the 3 appends
            assert [e["seq"] for e in history] == list(range(1, 8))
            # The metric is recorded right after the write the client just read.
            replayed = _scrape_until(base, lambda m: value(m, f"{REPLAY}_count") > value(before, f"{REPLAY}_count"))
            # Now live: the next commit is published to the stream as it lands.
            answer = do_put(server.location, ("demo", "cities"), city_rows(1, first_id=3000))
            assert feed.events(1)[0]["seq"] == answer["commit_seq"]
            after = _scrape_until(base, lambda m: value(m, f"{LIVE}_count") > value(replayed, f"{LIVE}_count"))
    # The replay: counted as replay, its age (>= AGE_S) nowhere in the live histogram.
    assert value(replayed, f"{REPLAY}_sum") - value(before, f"{REPLAY}_sum") >= AGE_S
    assert value(replayed, f"{LIVE}_count") == value(before, f"{LIVE}_count")
    # The live delivery: counted as live, fast, and not as a replay.
    live_count = value(after, f"{LIVE}_count") - value(replayed, f"{LIVE}_count")
    live_sum = value(after, f"{LIVE}_sum") - value(replayed, f"{LIVE}_sum")
    assert live_count >= 1
    assert live_sum / live_count < 1.0, f"live lag {live_sum / live_count:.3f} s"
    assert value(after, f"{LIVE}_bucket", le="1.0") - value(replayed, f"{LIVE}_bucket", le="1.0") == live_count
    assert value(after, f"{REPLAY}_count") == value(replayed, f"{REPLAY}_count")
