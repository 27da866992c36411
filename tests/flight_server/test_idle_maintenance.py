"""Background maintenance commits nothing on a table nobody writes (issue 39, item 9).

Snapshots age past the retention window one by one, so expiring whatever had aged out at each
period made an idle table commit ``expire`` every period for a whole window after its last
write. Here the periods are shortened with ``ICEFLOE_EXPIRY_PERIOD_S`` / ``ICEFLOE_SWEEP_PERIOD_S``
and the window with the table property; a feed subscriber watches the idle time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight

from tests.doput_client import do_put
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.servers import serving

PERIOD_S = 0.3
WINDOW_MS = 6000
# The maintainer looks every second, then expires when a period has passed: its first look after
# the burst lands within about 1.3 s (more on a loaded machine).
SETTLE_S = 3.5


def _head(location: str) -> int:
    client = flight.FlightClient(location)
    try:
        result = next(client.do_action(flight.Action("icefloe.health", b"")))
        assert json.loads(result.body.to_pybytes())["ready"]
        status = next(client.do_action(flight.Action("icefloe.status", b"")))
        head: int = json.loads(status.body.to_pybytes())["commit_head"]
        return head
    finally:
        client.close()


def test_an_idle_table_commits_nothing_over_several_maintenance_periods(tmp_path: Path) -> None:
    env = {"ICEFLOE_EXPIRY_PERIOD_S": str(PERIOD_S), "ICEFLOE_SWEEP_PERIOD_S": str(PERIOD_S)}
    with serving(tmp_path / "wh", env=env) as server:
        with flightsql.connect(server.location) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE idle (a INTEGER)")
            cur.execute(f"ALTER TABLE idle SET ('history.expire.max-snapshot-age-ms' = '{WINDOW_MS}')")
        # Snapshots spread over most of the window: they age out one after another later.
        for i in range(10):
            do_put(server.location, ("default", "idle"), pa.table({"a": pa.array([i], pa.int32())}))
            time.sleep(0.25)
        # The first expiry after the burst may land (it follows writes); then the table is idle.
        time.sleep(SETTLE_S)
        head = _head(server.location)
        feed = FeedReader(server.location, {"feed": "commits.v1", "after": head, "heartbeat_ms": 200})
        try:
            # Past the whole window: before the fix each period expired the snapshots that had
            # just aged out (the burst's snapshots age out during this wait).
            deadline = time.monotonic() + WINDOW_MS / 1000 - SETTLE_S + 2.0
            seen: list[str] = []
            while time.monotonic() < deadline:
                message = feed.next(timeout=5)
                if message.kind == "batch":
                    assert message.batch is not None
                    seen += [f"{seq}:{op}" for seq, op in zip(message.batch.column("seq").to_pylist(),
                                                             message.batch.column("operation").to_pylist(),
                                                             strict=True)]
            assert seen == [], f"an idle table committed: {seen}"
            assert _head(server.location) == head
        finally:
            feed.close()
        # It still expires after the next write: the aged-out snapshots go then, in one commit.
        do_put(server.location, ("default", "idle"), pa.table({"a": pa.array([99], pa.int32())}))
        deadline = time.monotonic() + 10
        while _head(server.location) < head + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _head(server.location) == head + 2
        time.sleep(SETTLE_S)
        assert _head(server.location) == head + 2
    from catalog import RocksCatalog

    catalog = RocksCatalog("check", warehouse=str(tmp_path / "wh"))
    try:
        records = list(catalog.log.read(head))
        assert [r.operation for r in records] == ["append", "expire"]
        assert len(catalog.load_table("default.idle").metadata.snapshots) < 11
    finally:
        catalog.close()
