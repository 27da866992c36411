"""commits.v1 protocol: hello, event schema, replay, filters, heartbeats, errors."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from feed_helpers import SCHEMA, FeedReader, rows
from pyiceberg.types import StringType

from flight_server.server import IcefloeServer

# The event schema as DESIGN.md fixes it (written out here, not imported, on purpose).
CONTRACT_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("namespace", pa.utf8(), nullable=False),
        pa.field("table", pa.utf8(), nullable=False),
        pa.field("table_uuid", pa.utf8()),
        pa.field("operation", pa.utf8(), nullable=False),
        pa.field("snapshot_id", pa.int64()),
        pa.field("parent_snapshot_id", pa.int64()),
        pa.field("added_rows", pa.int64()),
        pa.field("deleted_rows", pa.int64()),
        pa.field("added_files", pa.int64()),
        pa.field("metadata_location", pa.utf8()),
        pa.field("principal", pa.utf8()),
        # DESIGN.md "Row-level deletes": events gain data_change (and removed_files).
        pa.field("data_change", pa.bool_()),
        pa.field("removed_files", pa.int64()),
        # Flight SQL transactions: the commits of one transaction share its id.
        pa.field("transaction_id", pa.utf8()),
        # The quality gate's results (JSON), on commits of tables that declare expectations.
        pa.field("quality", pa.utf8()),
    ]
)


def feed(location: str, **request: object) -> FeedReader:
    return FeedReader(location, {"feed": "commits.v1", **request})


def test_hello_then_replay_from_earliest(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("sales")
    table = cat.create_table("sales.orders", SCHEMA)
    table.append(rows(0, 3))
    table.append(rows(3, 2))
    with feed(location, after="earliest") as f:
        hello = f.next()
        assert hello.metadata == {"hello": {"log_start": 1, "head": 3}}
        events = f.events(3)
        assert f.reader.schema == CONTRACT_SCHEMA
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert [e["operation"] for e in events] == ["create", "append", "append"]
    assert {(e["namespace"], e["table"]) for e in events} == {("sales", "orders")}
    assert [e["added_rows"] for e in events[1:]] == [3, 2]
    assert [e["added_files"] for e in events[1:]] == [1, 1]
    assert events[2]["parent_snapshot_id"] == events[1]["snapshot_id"]
    assert events[2]["snapshot_id"] == table.metadata.current_snapshot().snapshot_id
    assert events[2]["table_uuid"] == str(table.metadata.table_uuid)
    assert events[2]["metadata_location"] == table.metadata_location
    assert events[0]["committed_at"] <= events[1]["committed_at"] <= events[2]["committed_at"]


def test_replay_from_seq_then_tail_live(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    for i in range(3):
        table.append(rows(i, 1))  # seqs 2..4
    with feed(location, after=2) as f:
        assert f.next().metadata == {"hello": {"log_start": 1, "head": 4}}
        assert [e["seq"] for e in f.events(2)] == [3, 4]
        table.append(rows(10, 1))
        cat.create_table("ns.u", SCHEMA)
        live = f.events(2)
    assert [(e["seq"], e["operation"], e["table"]) for e in live] == [(5, "append", "t"), (6, "create", "u")]


def test_latest_skips_history(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_table("ns.old", SCHEMA)
    with feed(location, after="latest", heartbeat_ms=100) as f:
        assert f.next().metadata == {"hello": {"log_start": 1, "head": 1}}
        # Nothing from the past: the next message is a heartbeat, not an event.
        assert f.next().metadata == {"heartbeat": {"head": 1}}
        cat.create_table("ns.new", SCHEMA)
        [event] = f.events(1)
    assert (event["seq"], event["table"]) == (2, "new")


def test_table_filters_and_globs(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    for ns in ("a", "b", "c", "a.deep"):
        cat.create_namespace(ns)
    names = ["a.x", "b.t1", "a.y", "b.t2", "c.t1", "a.deep.z", "b.t10"]
    with feed(location, after="latest", tables=["a.*", "b.t1", "c.?1"]) as f:
        f.wait_for("hello")
        for name in names:
            cat.create_table(name, SCHEMA)
        cat.create_table("a.last", SCHEMA)
        events = f.events(5)
    got = [f"{e['namespace']}.{e['table']}" for e in events]
    # "a.*" matches one level only (not a.deep.z); "b.t1" is exact (not b.t10).
    assert got == ["a.x", "b.t1", "a.y", "c.t1", "a.last"]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)


def test_multi_level_namespace_glob(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("a")
    cat.create_namespace("a.deep")
    with feed(location, after="latest", tables=["a.*.*"]) as f:
        f.wait_for("hello")
        cat.create_table("a.top", SCHEMA)
        cat.create_table("a.deep.z", SCHEMA)
        [event] = f.events(1)
    assert (event["namespace"], event["table"]) == ("a.deep", "z")


def test_heartbeats_when_idle_report_covered_head(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    with feed(location, after="latest", tables=["other.*"], heartbeat_ms=100) as f:
        f.wait_for("hello")
        beats = [f.wait_for("heartbeat").metadata for _ in range(3)]
        assert beats == [{"heartbeat": {"head": 1}}] * 3
        # Commits that do not match still advance the head a client may resume after.
        cat.create_table("ns.u", SCHEMA)
        deadline = time.monotonic() + 10
        while f.wait_for("heartbeat").metadata != {"heartbeat": {"head": 2}}:
            assert time.monotonic() < deadline


def test_heartbeats_keep_their_interval_once_the_stream_is_live(feed_server: IcefloeServer, location: str) -> None:
    # A caught-up stream is written by the fan-out pool; its heartbeats must still come every
    # heartbeat_ms, not at the stream thread's 200 ms polling slice (10 beats: 0.5 s, not 2 s).
    with feed(location, after="latest", heartbeat_ms=50) as f:
        f.wait_for("hello")
        deadline = time.monotonic() + 5
        while feed_server.feed.fanout.attached_count < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        f.wait_for("heartbeat")
        start = time.monotonic()
        for _ in range(10):
            f.wait_for("heartbeat")
        assert time.monotonic() - start < 1.5


def test_every_commit_kind_is_an_event(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    with feed(location, after="latest", tables=["ns.t", "ns.t2"]) as f:
        f.wait_for("hello")
        table = cat.create_table("ns.t", SCHEMA)
        table.append(rows(0, 10))
        table.overwrite(rows(100, 4))
        table.delete("id >= 102")
        with table.update_schema() as update:
            update.add_column("extra", StringType())
        with table.transaction() as tx:
            tx.set_properties(owner="ops")
        cat.rename_table("ns.t", "ns.t2")
        cat.drop_table("ns.t2")
        events = f.events(8)
    ops = [e["operation"] for e in events]
    assert ops[:3] == ["create", "append", "overwrite"]
    assert ops[3] in ("delete", "overwrite")  # copy-on-write delete rewrites the file
    # Copy-on-write: the 4-row file is replaced by a 2-row file.
    assert events[3]["deleted_rows"] - events[3]["added_rows"] == 2
    assert (events[2]["added_rows"], events[2]["deleted_rows"]) == (4, 10)
    assert ops[4:] == ["schema", "properties", "rename", "drop"]
    assert [e["table"] for e in events[-2:]] == ["t2", "t2"]
    assert [e["seq"] for e in events] == list(range(events[0]["seq"], events[0]["seq"] + 8))


def test_rename_matches_old_name(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    cat.create_namespace("other")
    cat.create_table("ns.t", SCHEMA)
    with feed(location, after="latest", tables=["ns.t"]) as f:
        f.wait_for("hello")
        cat.rename_table("ns.t", "other.moved")
        [event] = f.events(1)
    assert (event["operation"], event["namespace"], event["table"]) == ("rename", "other", "moved")


@pytest.mark.parametrize(
    "command, message",
    [
        (b"not json", "must be a JSON object"),
        (b"\xff\xfe", "must be a JSON object"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"after": 0}', "'feed' must be one of"),
        (b'{"feed": "commits.v2"}', "'feed' must be one of"),
        (b'{"feed": "commits.v1", "aftr": 0}', "unknown feed subscription key"),
        (b'{"feed": "commits.v1", "after": -1}', "'after' must be >= 0"),
        (b'{"feed": "commits.v1", "after": 1.5}', "'after' must be a commit sequence number"),
        (b'{"feed": "commits.v1", "after": "soon"}', "'after' must be a commit sequence number"),
        (b'{"feed": "commits.v1", "after": true}', "'after' must be a commit sequence number"),
        (b'{"feed": "commits.v1", "after": null}', "'after' must be a commit sequence number"),
        (b'{"feed": "commits.v1", "tables": []}', "'tables' must be a non-empty list"),
        (b'{"feed": "commits.v1", "tables": "ns.t"}', "'tables' must be a non-empty list"),
        (b'{"feed": "commits.v1", "tables": [1]}', "each entry of 'tables' must be a string"),
        (b'{"feed": "commits.v1", "tables": ["t"]}', "must be qualified with its namespace"),
        (b'{"feed": "commits.v1", "tables": ["ns..t"]}', "bad table pattern"),
        (b'{"feed": "commits.v1", "tables": ["ns/x.t"]}', "bad table pattern"),
        (b'{"feed": "commits.v1", "tables": ["ns.[a"]}', "unbalanced"),
        (b'{"feed": "commits.v1", "heartbeat_ms": 0}', "'heartbeat_ms' must be between"),
        (b'{"feed": "commits.v1", "heartbeat_ms": 1000000000}', "'heartbeat_ms' must be between"),
        (b'{"feed": "commits.v1", "heartbeat_ms": "1s"}', "'heartbeat_ms' must be an integer"),
        (b'{"feed": "rows.v1"}', "rows.v1 needs exactly one table"),
        (b'{"feed": "rows.v1", "tables": ["ns.a", "ns.b"]}', "rows.v1 needs exactly one table"),
        (b'{"feed": "rows.v1", "tables": ["ns.*"]}', "rows.v1 needs exactly one table"),
    ],
)
def test_malformed_subscription_is_invalid_argument(location: str, command: bytes, message: str) -> None:
    client = flight.connect(location)
    try:
        _, reader = client.do_exchange(flight.FlightDescriptor.for_command(command))
        with pytest.raises(pa.ArrowInvalid) as info:
            reader.read_chunk()
        text = str(info.value)
        assert "INVALID_ARGUMENT" in text and message in text
        assert "Traceback" not in text
    finally:
        client.close()


def test_path_descriptor_is_refused(location: str) -> None:
    client = flight.connect(location)
    try:
        _, reader = client.do_exchange(flight.FlightDescriptor.for_path("ns", "t"))
        with pytest.raises(pa.ArrowInvalid, match="INVALID_ARGUMENT.*for_command"):
            reader.read_chunk()
    finally:
        client.close()


def test_expired_cursor_and_cursor_ahead(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    for i in range(5):
        cat.create_table(f"ns.t{i}", SCHEMA)  # seqs 1..5
    assert cat.log.trim(3) == 4
    with feed(location, after=2) as f:
        err = f.error()
    assert "cursor expired: log starts at 4" in str(err)
    assert "Traceback" not in str(err)
    with feed(location, after=3) as f:
        assert f.next().metadata == {"hello": {"log_start": 4, "head": 5}}
        assert [e["seq"] for e in f.events(2)] == [4, 5]
    with feed(location, after="earliest") as f:
        assert [e["seq"] for e in f.events(2)] == [4, 5]
    with feed(location, after=6) as f:
        assert "cursor 6 is ahead of the log head 5" in str(f.error())
    # The server survived all of it.
    with feed(location, after=5, heartbeat_ms=100) as f:
        assert f.next().metadata == {"hello": {"log_start": 4, "head": 5}}


def test_subscriber_cap_and_cleanup(feed_server: IcefloeServer, location: str) -> None:
    hub = feed_server.catalog.hub
    hub.max_subscribers = 2
    first, second = feed(location), feed(location)
    try:
        first.wait_for("hello")
        second.wait_for("hello")
        with feed(location) as third:
            assert "subscriber limit reached (2)" in str(third.error())
        first.close()
        # The server notices the cancelled call and frees its slot.
        deadline = time.monotonic() + 10
        while hub.subscriber_count > 1:
            assert time.monotonic() < deadline, "cancelled subscriber was not cleaned up"
            time.sleep(0.05)
        with feed(location) as fourth:
            assert fourth.wait_for("hello").metadata is not None
    finally:
        first.close()
        second.close()


def test_hello_is_json_metadata_only(location: str) -> None:
    with feed(location) as f:
        msg = f.next()
    assert msg.batch is None
    assert json.loads(json.dumps(msg.metadata)) == {"hello": {"log_start": 1, "head": 0}}


def test_vanished_client_is_cleaned_up(feed_server: IcefloeServer, location: str) -> None:
    """A subscriber process that dies without closing its call frees its subscription."""
    import subprocess
    import sys

    script = (
        "import json, sys, time, pyarrow.flight as fl\n"
        "c = fl.connect(sys.argv[1])\n"
        "w, r = c.do_exchange(fl.FlightDescriptor.for_command(json.dumps({'feed': 'commits.v1'}).encode()))\n"
        "r.read_chunk(); print('subscribed', flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, location], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "subscribed"
        assert feed_server.catalog.hub.subscriber_count == 1
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20
    while feed_server.catalog.hub.subscriber_count:
        assert time.monotonic() < deadline, "the dead client's subscription was not cleaned up"
        time.sleep(0.05)
