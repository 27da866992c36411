"""Time travel (AT VERSION / AT TIMESTAMP) and the $snapshots / $history / $files tables."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import adbc_driver_manager
import pytest
from sqlwrites_lib import rows, scalar, sql, update


def _commits(conn: Any, ns: str) -> list[dict[str, Any]]:
    """Create ns.t and change it four times; returns $snapshots rows in commit order."""
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id INT, v VARCHAR)")
    for statement in (
        f"INSERT INTO {ns}.t VALUES (1, 'a'), (2, 'b')",
        f"INSERT INTO {ns}.t VALUES (3, 'c')",
        f"DELETE FROM {ns}.t WHERE id = 1",
        f"UPDATE {ns}.t SET v = 'B' WHERE id = 2",
    ):
        time.sleep(0.02)  # distinct commit timestamps (milliseconds) for AT (TIMESTAMP => ...)
        update(conn, statement)
    return rows(conn, f'SELECT * FROM {ns}."t$snapshots" ORDER BY committed_at')


def test_time_travel_by_version(conn: Any) -> None:
    snaps = _commits(conn, "hist_a")
    # The DELETE rewrote a file (kept id 2), so Iceberg records an overwrite; the feed says "delete".
    assert [s["operation"] for s in snaps] == ["append", "append", "overwrite", "overwrite"]
    states = [
        [(1, "a"), (2, "b")],
        [(1, "a"), (2, "b"), (3, "c")],
        [(2, "b"), (3, "c")],
        [(2, "B"), (3, "c")],
    ]
    for snap, state in zip(snaps, states, strict=True):
        got = sql(conn, f"SELECT id, v FROM hist_a.t AT (VERSION => {snap['snapshot_id']}) ORDER BY id")
        assert [tuple(r.values()) for r in got.to_pylist()] == state
    # Two snapshots of one table in one query, with aliases, and the current one.
    first, last = snaps[0]["snapshot_id"], snaps[-1]["snapshot_id"]
    joined = rows(conn, f"""SELECT o.id, o.v AS old, n.v AS new, c.v AS cur
        FROM hist_a.t AS o AT (VERSION => {first}) JOIN hist_a.t AS n AT (VERSION => {last}) ON o.id = n.id
        JOIN hist_a.t c ON c.id = o.id""")
    assert joined == [{"id": 2, "old": "b", "new": "B", "cur": "B"}]
    # The parent chain is linear.
    assert [s["parent_id"] for s in snaps] == [None] + [s["snapshot_id"] for s in snaps[:-1]]


def test_time_travel_by_timestamp(conn: Any) -> None:
    snaps = _commits(conn, "hist_b")
    for i, snap in enumerate(snaps):
        at = snap["committed_at"].isoformat()
        expected = scalar(conn, f"SELECT count(*) FROM hist_b.t AT (VERSION => {snap['snapshot_id']})")
        assert scalar(conn, f"SELECT count(*) FROM hist_b.t AT (TIMESTAMP => TIMESTAMPTZ '{at}')") == expected, i
        # Just before the next commit still reads this snapshot.
        if i + 1 < len(snaps):
            before_next = (snaps[i + 1]["committed_at"] - timedelta(milliseconds=1)).isoformat()
            got = scalar(conn, f"SELECT count(*) FROM hist_b.t AT (TIMESTAMP => TIMESTAMPTZ '{before_next}')")
            assert got == expected
    too_early = (snaps[0]["committed_at"] - timedelta(seconds=1)).isoformat()
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND.*hist_b.t has no snapshot at or before"):
        sql(conn, f"SELECT * FROM hist_b.t AT (TIMESTAMP => TIMESTAMPTZ '{too_early}')")
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND.*hist_b.t has no snapshot 12345"):
        sql(conn, "SELECT * FROM hist_b.t AT (VERSION => 12345)")


def test_time_travel_reads_the_schema_of_that_snapshot(conn: Any) -> None:
    update(conn, "CREATE SCHEMA hist_c")
    update(conn, "CREATE TABLE hist_c.t (a INT, b VARCHAR)")
    update(conn, "INSERT INTO hist_c.t VALUES (1, 'x')")
    old = scalar(conn, 'SELECT max_by(snapshot_id, committed_at) FROM hist_c."t$snapshots"')
    update(conn, "ALTER TABLE hist_c.t RENAME COLUMN b TO label")
    update(conn, "ALTER TABLE hist_c.t ADD COLUMN c INT")
    update(conn, "INSERT INTO hist_c.t VALUES (2, 'y', 20)")
    assert sql(conn, f"SELECT * FROM hist_c.t AT (VERSION => {old})").to_pylist() == [{"a": 1, "b": "x"}]
    assert rows(conn, "SELECT * FROM hist_c.t ORDER BY a") == [
        {"a": 1, "label": "x", "c": None}, {"a": 2, "label": "y", "c": 20}]


def test_insert_select_from_the_past(conn: Any) -> None:
    snaps = _commits(conn, "hist_d")
    update(conn, "CREATE TABLE hist_d.restored (id INT, v VARCHAR)")
    first = snaps[1]["snapshot_id"]
    assert update(conn, f"INSERT INTO hist_d.restored SELECT * FROM hist_d.t AT (VERSION => {first})") == 3
    assert rows(conn, "SELECT id FROM hist_d.restored ORDER BY id") == [{"id": 1}, {"id": 2}, {"id": 3}]


def test_metadata_tables_after_appends_and_deletes(conn: Any, reader_catalog: Any) -> None:
    snaps = _commits(conn, "hist_e")
    table = reader_catalog.load_table("hist_e.t")
    assert [s["snapshot_id"] for s in snaps] == [s.snapshot_id for s in table.metadata.snapshots]
    assert snaps[0]["summary"] and dict(snaps[0]["summary"])["added-records"] == "2"
    assert dict(snaps[2]["summary"])["deleted-records"] == "2"  # the file holding ids 1 and 2 went away
    history = rows(conn, 'SELECT * FROM hist_e."t$history" ORDER BY made_current_at')
    assert [h["snapshot_id"] for h in history] == [s["snapshot_id"] for s in snaps]
    assert all(h["is_current_ancestor"] for h in history)
    files = rows(conn, 'SELECT path, record_count, file_size, partition, content FROM hist_e."t$files" ORDER BY path')
    expected = sorted(
        (t.file.file_path, t.file.record_count, t.file.file_size_in_bytes) for t in table.scan().plan_files())
    assert [(f["path"], f["record_count"], f["file_size"]) for f in files] == expected
    assert sum(f["record_count"] for f in files) == scalar(conn, "SELECT count(*) FROM hist_e.t") == 2
    assert {f["content"] for f in files} == {"data"} and {f["partition"] for f in files} == {None}
    # Metadata tables are plain SQL sources: filter, aggregate, join.
    assert scalar(conn, """SELECT count(*) FROM hist_e."t$snapshots" s JOIN hist_e."t$history" h
                           USING (snapshot_id) WHERE s.operation = 'append'""") == 2
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND"):
        sql(conn, 'SELECT * FROM hist_e."nope$snapshots"')


def test_metadata_tables_of_an_empty_table(conn: Any) -> None:
    update(conn, "CREATE SCHEMA hist_f")
    update(conn, "CREATE TABLE hist_f.t (a INT)")
    assert sql(conn, 'SELECT * FROM hist_f."t$snapshots"').num_rows == 0
    assert sql(conn, 'SELECT * FROM hist_f."t$history"').num_rows == 0
    assert sql(conn, 'SELECT * FROM hist_f."t$files"').num_rows == 0
