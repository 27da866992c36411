"""The watch page's event streams: a page that stops reading never holds up the committing
thread; it overflows its own queue and is told to resync, while a reading page gets every
event in order. Real commit hub of a real catalog; the records are published as commits are."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from catalog import RocksCatalog
from catalog.commit_log import CommitRecord
from flight_server.http.ops import events
from flight_server.http.ops.events import CommitBroadcaster


def _record(seq: int) -> CommitRecord:
    return CommitRecord(seq=seq, committed_at_us=1_700_000_000_000_000 + seq, namespace=("ns",), table="t",
                        table_uuid=None, operation="append", added_rows=1, metadata_location="/secret/path.json")


def test_a_page_that_stops_reading_never_blocks_commits(tmp_path: Path) -> None:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        broadcaster = CommitBroadcaster(catalog.hub, threading.Event())

        async def scenario() -> tuple[list[str], list[str]]:
            stalled, reading = broadcaster.open(), broadcaster.open()
            stalled_stream = broadcaster.stream(stalled, 0)
            reading_stream = broadcaster.stream(reading, 0)
            assert "event: hello" in await anext(stalled_stream)
            assert "event: hello" in await anext(reading_stream)
            total = events.QUEUE_SIZE * 3
            got: list[str] = []

            async def read_all() -> None:
                while len(got) < total:
                    got.append(await anext(reading_stream))

            reader = asyncio.create_task(read_all())
            # Published from another thread, as a committing thread does, in bursts the reading
            # page keeps up with; the stalled page never reads, and its queue overflows.
            chunk = events.QUEUE_SIZE // 2
            for first in range(1, total + 1, chunk):
                seqs = range(first, min(total, first + chunk - 1) + 1)
                await asyncio.to_thread(lambda seqs=seqs: [catalog.hub.publish(_record(s)) for s in seqs])
                deadline = asyncio.get_running_loop().time() + 30
                while len(got) < seqs[-1] and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.005)
            await asyncio.wait_for(reader, 30)
            # The stalled page, reading again: its queue overflowed, so it is told to reload.
            later = [await anext(stalled_stream)]
            await stalled_stream.aclose()
            await reading_stream.aclose()
            return got, later

        got, later = asyncio.run(scenario())
        seqs = [int(message.split("\n", 1)[0].removeprefix("id: ")) for message in got]
        assert seqs == list(range(1, events.QUEUE_SIZE * 3 + 1))
        assert all("/secret" not in message for message in got)
        assert later[0].startswith("event: resync"), later
    finally:
        catalog.close()


def test_too_many_pages_are_refused(tmp_path: Path) -> None:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        broadcaster = CommitBroadcaster(catalog.hub, threading.Event(), max_clients=2)

        async def scenario() -> None:
            broadcaster.open()
            broadcaster.open()
            try:
                broadcaster.open()
            except events.TooManyWatchers:
                return
            raise AssertionError("a third stream was let in")

        asyncio.run(scenario())
    finally:
        catalog.close()
