"""rows.v1: appended rows with _seq/_snapshot_id/_operation; other commits announced."""

from __future__ import annotations

import pyarrow as pa
import pytest
from feed_helpers import SCHEMA, FeedReader, Message, rows
from pyiceberg.types import StringType
from storage_kinds import ON_EVERY_STORAGE

from flight_server.server import IcefloeServer

# Old metadata files are deleted after one newer version, so replay cannot use them.
FORGETFUL = {"write.metadata.previous-versions-max": "1", "write.metadata.delete-after-commit.enabled": "true"}

EXTRA = [
    pa.field("_seq", pa.int64(), nullable=False),
    pa.field("_snapshot_id", pa.int64(), nullable=False),
    pa.field("_operation", pa.utf8(), nullable=False),
]


# The row feed reads appended files from a local folder and from S3 alike.
pytestmark = ON_EVERY_STORAGE

def row_feed(location: str, after: object = "earliest", table: str = "ns.t") -> FeedReader:
    return FeedReader(location, {"feed": "rows.v1", "after": after, "tables": [table], "heartbeat_ms": 100})


def next_commit(reader: FeedReader) -> tuple[list[dict[str, object]], dict[str, object]]:
    """Rows up to and including the next ``commit`` message, and that commit."""
    got: list[dict[str, object]] = []
    while True:
        msg: Message = reader.next()
        if msg.batch is not None:
            got.extend(msg.batch.to_pylist())
        if msg.metadata is not None and "commit" in msg.metadata:
            return got, msg.metadata["commit"]


@pytest.fixture
def table_setup(feed_server: IcefloeServer):  # type: ignore[no-untyped-def]
    cat = feed_server.catalog
    cat.create_namespace("ns")
    return cat.create_table("ns.t", SCHEMA)


def test_appends_replay_then_live(feed_server: IcefloeServer, location: str, table_setup) -> None:  # type: ignore[no-untyped-def]
    table = table_setup
    table.append(rows(0, 3))
    table.append(rows(3, 2))
    with row_feed(location) as f:
        assert f.next().metadata == {"hello": {"log_start": 1, "head": 3}}
        created_rows, created = next_commit(f)
        assert created_rows == [] and created["operation"] == "create" and created["seq"] == 1
        first, commit = next_commit(f)
        assert f.reader.schema == pa.schema([*SCHEMA, *EXTRA])
        snap1 = commit["snapshot_id"]
        assert commit["seq"] == 2 and commit["operation"] == "append" and commit["added_rows"] == 3
        assert first == [
            {"id": i, "name": f"n{i}", "_seq": 2, "_snapshot_id": snap1, "_operation": "append"} for i in range(3)
        ]
        second, commit = next_commit(f)
        assert [(r["id"], r["_seq"]) for r in second] == [(3, 3), (4, 3)]
        table.append(rows(10, 1))
        live, commit = next_commit(f)
    assert live == [
        {"id": 10, "name": "n10", "_seq": 4, "_snapshot_id": commit["snapshot_id"], "_operation": "append"}
    ]
    assert commit["snapshot_id"] == table.metadata.current_snapshot().snapshot_id


def test_non_append_commits_are_announced_not_streamed(
    feed_server: IcefloeServer, location: str, table_setup  # type: ignore[no-untyped-def]
) -> None:
    table = table_setup
    table.append(rows(0, 10))
    table.append(rows(50, 5))
    with row_feed(location, after="latest") as f:
        f.wait_for("hello")
        table.delete("id >= 50")  # drops a whole file: a pure delete
        table.delete("id < 5")  # rewrites a file (copy-on-write): an overwrite
        table.overwrite(rows(100, 2))
        with table.transaction() as tx:
            tx.set_properties(owner="ops")
        table.append(rows(200, 1))
        announced = [next_commit(f) for _ in range(5)]
    for got, _ in announced[:4]:
        assert got == []  # a consumer is told to re-read; no rows are pushed for these
    commits = [c for _, c in announced]
    assert [c["operation"] for c in commits] == ["delete", "overwrite", "overwrite", "properties", "append"]
    assert commits[0]["deleted_rows"] == 5
    assert commits[1]["deleted_rows"] - commits[1]["added_rows"] == 5
    assert [(r["id"], r["_seq"]) for r in announced[4][0]] == [(200, commits[4]["seq"])]


def test_commit_with_two_appends_streams_both(feed_server: IcefloeServer, location: str, table_setup) -> None:  # type: ignore[no-untyped-def]
    table = table_setup
    with row_feed(location, after="latest") as f:
        f.wait_for("hello")
        with table.transaction() as tx:
            tx.append(rows(0, 2))
            tx.append(rows(2, 2))
        got, commit = next_commit(f)
    assert commit["operation"] == "append" and commit["added_rows"] == 4
    assert sorted(r["id"] for r in got) == [0, 1, 2, 3]
    assert {r["_seq"] for r in got} == {commit["seq"]}


def test_schema_change_ends_stream_naming_seq(feed_server: IcefloeServer, location: str, table_setup) -> None:  # type: ignore[no-untyped-def]
    table = table_setup
    table.append(rows(0, 1))
    with row_feed(location) as f:
        next_commit(f)  # create
        got, _ = next_commit(f)
        assert [r["id"] for r in got] == [0]
        with table.update_schema() as update:
            update.add_column("color", StringType())
        _, schema_commit = next_commit(f)
        assert schema_commit["operation"] == "schema"
        err = f.error()
    seq = schema_commit["seq"]
    assert f"changed at seq {seq}; resubscribe with after={seq}" in str(err)
    assert "Traceback" not in str(err)
    table.append(pa.table({"id": [7], "name": ["n7"], "color": ["red"]}))
    with row_feed(location, after=seq) as f:
        f.wait_for("hello")
        got, commit = next_commit(f)
        assert f.reader.schema.names == ["id", "name", "color", "_seq", "_snapshot_id", "_operation"]
    assert got == [
        {"id": 7, "name": "n7", "color": "red", "_seq": seq + 1, "_snapshot_id": commit["snapshot_id"],
         "_operation": "append"}
    ]


def test_schema_change_before_any_rows_does_not_end_stream(
    feed_server: IcefloeServer, location: str, table_setup  # type: ignore[no-untyped-def]
) -> None:
    table = table_setup
    with row_feed(location, after="latest") as f:
        f.wait_for("hello")
        with table.update_schema() as update:
            update.add_column("color", StringType())
        table.append(pa.table({"id": [1], "name": ["a"], "color": ["blue"]}))
        _, first = next_commit(f)
        got, _ = next_commit(f)
    assert first["operation"] == "schema"
    assert got[0]["color"] == "blue"


def test_large_append_spans_batches_and_commit_marks_the_last(
    feed_server: IcefloeServer, location: str, table_setup  # type: ignore[no-untyped-def]
) -> None:
    table = table_setup
    n = 300_000
    table.append(pa.table({"id": pa.array(range(n), pa.int64()), "name": pa.array(["x"] * n)}, schema=SCHEMA))
    with row_feed(location, after=1) as f:
        f.wait_for("hello")
        messages = []
        while True:
            msg = f.next(timeout=60)
            messages.append(msg)
            if msg.metadata is not None and "commit" in msg.metadata:
                break
    batches = [m for m in messages if m.batch is not None]
    assert sum(m.batch.num_rows for m in batches) == n  # type: ignore[union-attr]
    assert len(batches) > 1
    assert all(m.metadata is None for m in batches[:-1]) and batches[-1].metadata is not None


def test_unknown_table_is_not_found(location: str) -> None:
    with row_feed(location, table="ns.nope") as f:
        err = f.error()
    assert "NOT_FOUND" in str(err) and "ns.nope" in str(err)


def test_replay_of_appends_whose_snapshots_expired(feed_server: IcefloeServer, location: str) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    # Keep only 3 snapshots, and let old metadata files go: replay must use live entries.
    table = cat.create_table("ns.t", SCHEMA, properties=FORGETFUL | {"icefloe.snapshots.retain": "3"})
    first_metadata = table.metadata_location
    for k in range(8):
        table.append(rows(k * 10, 2))
    assert len(table.metadata.snapshots) == 3
    assert not table.io.new_input(first_metadata).exists()
    with row_feed(location, after=1) as f:
        f.wait_for("hello")
        got = [next_commit(f) for _ in range(8)]
    assert [c["seq"] for _, c in got] == list(range(2, 10))
    for k, (batch_rows, commit) in enumerate(got):
        assert [(r["id"], r["_seq"]) for r in batch_rows] == [(k * 10, commit["seq"]), (k * 10 + 1, commit["seq"])]


def test_rows_of_a_rewritten_append_are_an_error_not_a_partial_send(
    feed_server: IcefloeServer, location: str
) -> None:
    cat = feed_server.catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA, properties=FORGETFUL | {"icefloe.snapshots.retain": "1"})
    table.append(rows(0, 4))  # seq 2; its snapshot and metadata file are gone after these:
    table.delete("id = 1")  # copy-on-write rewrites the file seq 2 added
    table.append(rows(10, 1))
    table.append(rows(20, 1))
    with row_feed(location, after=1) as f:
        err = f.error()
    assert "the rows of seq 2 are no longer available" in str(err)
    assert "resubscribe with after=2" in str(err)


def _drain(reader: FeedReader, timeout: float = 10.0) -> tuple[list[dict[str, object]], list[int]]:
    """Everything until the stream ends by itself: rows, and the seqs of commit messages."""
    got: list[dict[str, object]] = []
    commits: list[int] = []
    while True:
        item = reader.messages.get(timeout=timeout)
        if isinstance(item, StopIteration):
            return got, commits
        if isinstance(item, BaseException):
            raise item
        if item.batch is not None:
            got.extend(item.batch.to_pylist())
        if item.metadata is not None and "commit" in item.metadata:
            commits.append(int(item.metadata["commit"]["seq"]))


def test_until_ends_the_stream_after_that_seq(feed_server: IcefloeServer, location: str, table_setup) -> None:  # type: ignore[no-untyped-def]
    table = table_setup
    seqs = []
    for start in (0, 10, 20):
        table = feed_server.catalog.load_table("ns.t")
        table.append(rows(start, 2))
        seqs.append(feed_server.catalog.log.head())
    request = {"feed": "rows.v1", "after": seqs[0] - 1, "until": seqs[1], "tables": ["ns.t"], "heartbeat_ms": 100}
    with FeedReader(location, request) as reader:
        got, commits = _drain(reader)
    assert commits == seqs[:2]
    assert [r["id"] for r in got] == [0, 1, 10, 11]
    # until in the future: the stream waits for it, then ends
    request = {"feed": "rows.v1", "after": seqs[2], "until": seqs[2] + 1, "tables": ["ns.t"], "heartbeat_ms": 100}
    with FeedReader(location, request) as reader:
        feed_server.catalog.load_table("ns.t").append(rows(30, 1))
        feed_server.catalog.load_table("ns.t").append(rows(40, 1))
        got, commits = _drain(reader)
    assert [r["id"] for r in got] == [30] and commits == [seqs[2] + 1]


@pytest.mark.parametrize("until", [-1, "5", True, 2**63])
def test_bad_until_is_refused(location: str, until: object) -> None:
    request = {"feed": "rows.v1", "after": 0, "until": until, "tables": ["ns.t"]}
    with FeedReader(location, request) as reader:
        assert "until" in str(reader.error())
