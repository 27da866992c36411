"""Resuming the feed across server restarts (SIGTERM and SIGKILL): no gap, no duplicate."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from feed_helpers import SCHEMA, STALLING_CLIENT_OPTIONS, FeedReader, rows
from servers import ServerProcess

from catalog import RocksCatalog
from flight_server.cli.client import CommitEvent, subscribe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_offline(warehouse: Path, appends: int, create: bool = False) -> int:
    """Commit through pyiceberg while no server holds the warehouse; returns the new head."""
    cat = RocksCatalog("offline", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        if create:
            cat.create_namespace("ns")
            cat.create_table("ns.t", SCHEMA)
        table = cat.load_table("ns.t")
        for i in range(appends):
            table.append(rows(i, 1))
        return cat.log.head()
    finally:
        cat.close()


def wait_until(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_client_resumes_across_sigterm_and_sigkill(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    head = write_offline(warehouse, appends=2, create=True)  # seqs 1..3
    server = ServerProcess(warehouse, ["--port", str(free_port())]).start()
    received: list[CommitEvent] = []
    stop = threading.Event()
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            for event in subscribe(server.location, after="earliest", heartbeat_ms=200, max_backoff_s=0.3, stop=stop):
                received.append(event)
        except BaseException as exc:
            failure.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        wait_until(lambda: len(received) == head)
        assert server.stop() == 0  # SIGTERM with a subscriber attached: clean exit
        head = write_offline(warehouse, appends=2)  # seqs 4, 5 while the server is down
        server.start()
        wait_until(lambda: len(received) == head)
        server.kill()  # SIGKILL: no clean-up at all
        head = write_offline(warehouse, appends=3)  # seqs 6..8
        server.start()
        wait_until(lambda: len(received) == head)
        time.sleep(0.5)  # a duplicate would arrive now
    finally:
        stop.set()
        follower.join(30)
        server.stop()
    assert not failure, failure
    assert [e.seq for e in received] == list(range(1, head + 1))
    assert [e.operation for e in received] == ["create"] + ["append"] * (head - 1)


def test_raw_resume_after_restart_from_last_seq(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    write_offline(warehouse, appends=3, create=True)  # seqs 1..4
    server = ServerProcess(warehouse).start()
    try:
        with FeedReader(server.location, {"feed": "commits.v1", "after": "earliest"}) as f:
            seen = [e["seq"] for e in f.events(2)]  # the client read only part of the log
        server.kill()
        head = write_offline(warehouse, appends=1)
        server.start()
        with FeedReader(server.location, {"feed": "commits.v1", "after": seen[-1]}) as f:
            assert f.next().metadata == {"hello": {"log_start": 1, "head": head}}
            rest = [e["seq"] for e in f.events(head - seen[-1])]
    finally:
        server.stop()
    assert seen + rest == list(range(1, head + 1))


def test_sigterm_with_a_stalled_subscriber_still_exits(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    write_offline(warehouse, appends=40, create=True)
    # A short grace: the stop must still wait it out (the log says so), just not for 10 s.
    server = ServerProcess(warehouse, env={"ICEFLOE_SHUTDOWN_GRACE_S": "2"}).start()
    request = {"feed": "commits.v1", "after": "earliest"}
    stalled = FeedReader(server.location, request, generic_options=STALLING_CLIENT_OPTIONS, read=False)
    try:
        time.sleep(0.5)  # the stream thread is now blocked writing to the stalled client
        started = time.monotonic()
        assert server.stop(timeout=60) == 0
        assert time.monotonic() - started < 30
        # The blocked call was really stuck (this exercised the bounded wait), yet it exited.
        assert "did not finish" in server.log and "icefloe stopped" in server.log
        assert "within 2 s of shutdown" in server.log, "ICEFLOE_SHUTDOWN_GRACE_S set the wait"
    finally:
        stalled.close()
        server.kill()
