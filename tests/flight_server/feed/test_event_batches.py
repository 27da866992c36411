"""EventBatchCache: one shared event batch per (table filter, record set), never a wrong one."""

from __future__ import annotations

import pyarrow as pa

from catalog.commit_log import CommitRecord
from flight_server.feed.events import EVENT_SCHEMA, EventBatchCache


def record(seq: int, table: str = "t") -> CommitRecord:
    return CommitRecord(
        seq=seq,
        committed_at_us=1_700_000_000_000_000 + seq,
        namespace=("ns",),
        table=table,
        table_uuid="u",
        operation="append",
        snapshot_id=seq,
        added_rows=seq,
    )


def seqs(batch: pa.RecordBatch) -> list[int]:
    return batch.column("seq").to_pylist()


def test_consecutive_records_share_one_batch_and_stamp() -> None:
    cache = EventBatchCache()
    first = cache.matching(None, [record(1), record(2), record(3)], lambda r: True)
    again = cache.matching(None, [record(1), record(2), record(3)], lambda r: True)
    assert first is not None and again is first
    assert first.batch.schema == EVENT_SCHEMA
    assert seqs(first.batch) == [1, 2, 3]
    assert first.last_committed_at_us == record(3).committed_at_us


def test_record_sets_with_the_same_ends_and_length_are_told_apart() -> None:
    # [1, 2, 4] and [1, 3, 4] share their first and last seq and their length: a key made of
    # the ends alone would hand the second the first's batch.
    cache = EventBatchCache()
    a = cache.matching(None, [record(1), record(2), record(4)], lambda r: True)
    b = cache.matching(None, [record(1), record(3), record(4)], lambda r: True)
    assert a is not None and b is not None
    assert seqs(a.batch) == [1, 2, 4]
    assert seqs(b.batch) == [1, 3, 4]
    # And a consecutive run with the same ends is a third set.
    c = cache.matching(None, [record(1), record(2), record(3), record(4)], lambda r: True)
    assert c is not None and seqs(c.batch) == [1, 2, 3, 4]


def test_filters_are_kept_apart_and_a_filter_matching_nothing_sends_nothing() -> None:
    cache = EventBatchCache()
    records = [record(5, "a"), record(6, "b")]
    only_a = cache.matching(("ns.a",), records, lambda r: r.table == "a")
    only_b = cache.matching(("ns.b",), records, lambda r: r.table == "b")
    neither = cache.matching(("ns.c",), records, lambda r: False)
    assert only_a is not None and seqs(only_a.batch) == [5]
    assert only_b is not None and seqs(only_b.batch) == [6]
    assert only_b.last_committed_at_us == record(6).committed_at_us
    assert neither is None
    assert cache.matching(("ns.c",), records, lambda r: True) is None  # the answer is cached per filter key
