"""The Python feed client and ``icefloe subscribe``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime

import pytest
from feed_helpers import SCHEMA, rows
from servers import ROOT

from flight_server.cli.client import CommitEvent, FeedCursorExpired, FeedError, subscribe
from flight_server.server import IcefloeServer


def test_subscribe_yields_events_and_stops(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_namespace("other")
    table = cat.create_table("ns.t", SCHEMA)
    cat.create_table("other.x", SCHEMA)
    table.append(rows(0, 2))
    stop = threading.Event()
    got: list[CommitEvent] = []
    for event in subscribe(location, after="earliest", tables=["ns.*"], heartbeat_ms=100, stop=stop):
        got.append(event)
        if len(got) == 2:
            table.append(rows(2, 1))
        if len(got) == 3:
            stop.set()
    assert [(e.seq, e.operation, e.qualified_name) for e in got] == [
        (1, "create", "ns.t"),
        (3, "append", "ns.t"),
        (4, "append", "ns.t"),
    ]
    assert isinstance(got[0].committed_at, datetime) and got[0].committed_at.tzinfo is not None
    assert got[1].added_rows == 2
    assert json.loads(json.dumps(got[1].to_json()))["seq"] == 3


def test_subscribe_raises_final_errors(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    for i in range(3):
        cat.create_table(f"ns.t{i}", SCHEMA)
    cat.log.trim(2)
    with pytest.raises(FeedCursorExpired, match="cursor expired: log starts at 3"):
        next(subscribe(location, after=0))
    with pytest.raises(FeedError, match="must be qualified with its namespace"):
        next(subscribe(location, tables=["t"]))


def test_subscribe_without_reconnect_raises_when_server_is_down() -> None:
    with pytest.raises(ConnectionError):
        next(subscribe("grpc://127.0.0.1:1", reconnect=False))


def test_cli_prints_one_json_line_per_event(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_table("ns.skip", SCHEMA)
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows(0, 3))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flight_server.cli", "subscribe", "--uri", location, "--after", "0",
         "--table", "ns.t"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
        table.append(rows(3, 1))
        lines.append(json.loads(proc.stdout.readline()))
    finally:
        proc.terminate()
        proc.wait(30)
    assert [(e["seq"], e["operation"], e["table"]) for e in lines] == [(2, "create", "t"), (3, "append", "t"),
                                                                     (4, "append", "t")]
    assert datetime.fromisoformat(lines[0]["committed_at"]).tzinfo is not None


def test_cli_rejects_bad_after() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "flight_server.cli", "subscribe", "--after", "yesterday"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode != 0
    assert "--after must be a commit sequence number" in result.stderr
