"""A subscription that overflows its queue catches up from the log (and counts it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from catalog import RocksCatalog

SCHEMA = pa.schema([("id", pa.int64())])


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
