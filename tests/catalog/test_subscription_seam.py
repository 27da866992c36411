"""Subscription ordering when writers publish out of seq order (they publish after unlocking)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

from catalog import CommitRecord, RocksCatalog

SCHEMA = pa.schema([("id", pa.int64())])


def test_out_of_order_publish_is_delivered_in_order_without_gap(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        sub = cat.hub.subscribe(cat.log.head())
        assert sub.poll(timeout=0.01) == []
        held: list[CommitRecord] = []
        polled: list[CommitRecord] = []
        # The subscriber is already waiting on its queue (caught up) when two writers land
        # seq N+1 and N+2 and the second one's publish runs first.
        waiter = threading.Thread(target=lambda: polled.extend(sub.poll(timeout=10.0)))
        waiter.start()
        cat._publish = held.append  # type: ignore[method-assign]
        cat.create_table("ns.a", SCHEMA)
        cat.create_table("ns.b", SCHEMA)
        first, second = held
        cat.hub.publish(second)
        waiter.join(10)
        cat.hub.publish(first)
        got = polled + sub.poll(timeout=0.05)
        assert [r.seq for r in got] == [first.seq, second.seq]
        assert sub.poll(timeout=0.05) == []
    finally:
        cat.close()


def test_overflowing_subscriber_catches_up_from_the_log(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.hub.queue_size = 2
        cat.create_namespace("ns")
        sub = cat.hub.subscribe(0)
        for i in range(7):
            cat.create_table(f"ns.t{i}", SCHEMA)
        assert sub.lagging
        seqs: list[int] = []
        for _ in range(10):
            seqs += [r.seq for r in sub.poll(timeout=0.01, limit=3)]
        assert seqs == list(range(1, 8))
        assert sub.catch_ups == 1
    finally:
        cat.close()
