"""The commits.v1 event schema and the conversion of commit-log records into Arrow batches."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from catalog.commit_log import CommitRecord
from flight_server.feed.request import FeedRequest

# Fixed by the wire contract (DESIGN.md, "Commit feed"): names, types and nullability.
EVENT_SCHEMA = pa.schema(
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
        # Added after the first contract (DESIGN.md "Row-level deletes": events may gain
        # columns; clients read by name): false for commits that change no row (compaction,
        # expiry, schema); data and delete files the commit removed.
        pa.field("data_change", pa.bool_()),
        pa.field("removed_files", pa.int64()),
        # The Flight SQL transaction a commit belongs to (flight_server.transactions): every
        # table it wrote has its own event, all with this id; null outside transactions.
        pa.field("transaction_id", pa.utf8()),
        # The quality gate's results for the rows this commit wrote (catalog.expectations:
        # quarantined_rows and each expectation's checked / failed rows), as JSON; null when
        # the table declares no expectations or the commit did not go through the gate.
        pa.field("quality", pa.utf8()),
    ]
)


def record_matches(request: FeedRequest, record: CommitRecord) -> bool:
    """Whether a subscriber asked for this commit.

    A rename matches by its new name and by the name it had before, so a subscriber to the old
    name learns that its table moved away.
    """
    if request.matches((*record.namespace, record.table)):
        return True
    renamed_from = record.extra.get("renamed_from") if record.extra else None
    return isinstance(renamed_from, str) and request.matches(tuple(renamed_from.split(".")))


def _transaction_id(record: CommitRecord) -> str | None:
    value = record.extra.get("transaction_id") if record.extra else None
    return value if isinstance(value, str) else None


def _quality(record: CommitRecord) -> str | None:
    value = record.extra.get("quality") if record.extra else None
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else None


def records_to_batch(records: Sequence[CommitRecord]) -> pa.RecordBatch:
    """One record batch holding ``records`` in order, with ``EVENT_SCHEMA``."""
    columns: list[list[Any]] = [[] for _ in EVENT_SCHEMA]
    for r in records:
        row = (
            r.seq,
            r.committed_at_us,
            ".".join(r.namespace),
            r.table,
            r.table_uuid,
            r.operation,
            r.snapshot_id,
            r.parent_snapshot_id,
            r.added_rows,
            r.deleted_rows,
            r.added_files,
            r.metadata_location,
            r.principal,
            r.data_change,
            r.removed_files,
            _transaction_id(r),
            _quality(r),
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    arrays = [pa.array(column, type=field.type) for column, field in zip(columns, EVENT_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA)


class EventBatch(NamedTuple):
    """An event batch and what each delivery of it records (read once, not per stream)."""

    batch: pa.RecordBatch
    last_committed_at_us: int
    last_seq: int


def _records_key(records: Sequence[CommitRecord]) -> tuple[int, ...]:
    """A key naming exactly these records: a run of consecutive seqs (what the fan-out and
    the log hand over) is named by its ends, anything else by every seq."""
    first, last = records[0].seq, records[-1].seq
    if last - first + 1 == len(records):
        return (first, last)
    return (-1, *(r.seq for r in records))


class EventBatchCache:
    """Event batches shared by every stream that sends the same commits.

    Live subscribers usually receive the same one or two records per wake-up; building the
    batch once instead of once per subscriber keeps the feed's cost per commit nearly flat
    in the number of subscribers. Batches are immutable, so sharing them is safe.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._batches: OrderedDict[tuple[int, ...], EventBatch] = OrderedDict()
        # What streams with the same table filter are sent for the same records (None: none of
        # them matched): matching globs per stream was a fifth of a delivery's cost.
        self._filtered: OrderedDict[tuple[Hashable, tuple[int, ...]], EventBatch | None] = OrderedDict()
        self._lock = threading.Lock()

    def matching(
        self, filter_key: Hashable, records: Sequence[CommitRecord], matches: Callable[[CommitRecord], bool]
    ) -> EventBatch | None:
        """The batch of the ``records`` that ``matches`` accepts, or None if it accepts none.

        Args:
            filter_key: Equal for every stream whose ``matches`` gives the same answers.
            records: In seq order, at least one.
            matches: The stream's filter.
        """
        key = (filter_key, _records_key(records))
        # Under the lock: a commit wakes every live stream at once, and building outside it
        # made each of them miss the cache and build the same batch (measured: the largest
        # cost of a commit with 100 subscribers).
        with self._lock:
            found = self._filtered.get(key, self)
            if found is not self:
                return found  # type: ignore[return-value]
            matched = [r for r in records if matches(r)]
            event_batch = self._get(matched) if matched else None
            self._filtered[key] = event_batch
            while len(self._filtered) > self._size:
                self._filtered.popitem(last=False)
            return event_batch

    def _get(self, records: Sequence[CommitRecord]) -> EventBatch:
        """The batch of exactly ``records`` (caller holds the lock)."""
        key = _records_key(records)
        event_batch = self._batches.get(key)
        if event_batch is not None:
            self._batches.move_to_end(key)
            return event_batch
        event_batch = EventBatch(records_to_batch(records), records[-1].committed_at_us, records[-1].seq)
        self._batches[key] = event_batch
        while len(self._batches) > self._size:
            self._batches.popitem(last=False)
        return event_batch


def record_summary(record: CommitRecord) -> dict[str, Any]:
    """A commit as a JSON-ready dict (the event's columns; used in rows.v1 announcements)."""
    summary: dict[str, Any] = {
        "seq": record.seq,
        "committed_at_us": record.committed_at_us,
        "namespace": ".".join(record.namespace),
        "table": record.table,
        "table_uuid": record.table_uuid,
        "operation": record.operation,
        "snapshot_id": record.snapshot_id,
        "parent_snapshot_id": record.parent_snapshot_id,
        "added_rows": record.added_rows,
        "deleted_rows": record.deleted_rows,
        "added_files": record.added_files,
        "metadata_location": record.metadata_location,
        "principal": record.principal,
        "data_change": record.data_change,
        "removed_files": record.removed_files,
    }
    if _transaction_id(record) is not None:
        summary["transaction_id"] = _transaction_id(record)
    if _quality(record) is not None:
        summary["quality"] = record.extra["quality"]
    renamed_from = record.extra.get("renamed_from") if record.extra else None
    if renamed_from:
        summary["renamed_from"] = renamed_from
    return summary


def metadata_message(kind: str, body: dict[str, Any]) -> bytes:
    return json.dumps({kind: body}, separators=(",", ":")).encode("utf-8")
