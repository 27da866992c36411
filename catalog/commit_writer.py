"""The durable end of every catalog change: one fsync'd RocksDB batch per commit (or per group).

Each batch holds the changed pointers, the next commit sequence number and the commit-log
record (plus what must land with it: idempotency keys). The records are published on the
``CommitHub`` once the batch is durable, while the commit lock is still held, so the feed and
lineage see them in sequence order. Everything that writes a commit holds ``lock``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, NotRequired, TypedDict

from catalog import keys
from catalog.commit_log import CommitLog, CommitRecord
from catalog.context import current_commit_context
from catalog.idempotency import batch_extras
from catalog.store import RocksStore
from catalog.subscriptions import CommitHub

LOG_RETAIN_COUNT = "commit-log.retain-count"  # keep at most this many newest records
LOG_RETAIN_AGE_S = "commit-log.retain-age-s"  # drop records older than this many seconds
DEFAULT_LOG_RETAIN_COUNT = 1_000_000

# One commit: the commit-log record's fields, the keys to put, the keys to delete.
Commit = tuple[dict[str, Any], dict[bytes, bytes], tuple[bytes, ...]]

# Operations that name themselves; any other commit takes the operation of its commit context.
_OWN_OPERATIONS = ("create", "drop", "rename", "register", "replace")


def now_us() -> int:
    return time.time_ns() // 1000


class TablePointer(TypedDict):
    """A table's stored pointer, as ``pointer_value`` writes it (read with ``.get`` where a
    pointer written before that field existed may lack it)."""

    metadata_location: str
    previous_metadata_location: NotRequired[str | None]
    table_uuid: NotRequired[str]


def pointer_value(location: str, previous: str | None, table_uuid: str) -> bytes:
    """The stored table pointer: current and previous metadata location, and the table's UUID."""
    pointer: TablePointer = {
        "metadata_location": location, "previous_metadata_location": previous, "table_uuid": table_uuid
    }
    return json.dumps(pointer).encode("utf-8")


def log_retention(properties: dict[str, str]) -> tuple[int | None, int | None]:
    """The catalog properties' commit-log retention: (newest records kept, max age in seconds).

    Raises:
        ValueError: A retention property is not a non-negative integer.
    """
    return (_int_property(properties, LOG_RETAIN_COUNT, DEFAULT_LOG_RETAIN_COUNT),
            _int_property(properties, LOG_RETAIN_AGE_S, None))


def _int_property(properties: dict[str, str], name: str, default: int | None) -> int | None:
    raw = properties.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"catalog property {name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"catalog property {name} must not be negative, got {value}")
    return value


class CommitWriter:
    """Writes commits to the store and the commit log, and publishes them on the hub."""

    def __init__(self, store: RocksStore, log: CommitLog, hub: CommitHub) -> None:
        self.store = store
        self.log = log
        self.hub = hub
        self.lock = threading.Lock()

    def land_many(self, commits: list[Commit]) -> list[CommitRecord]:
        """Write several table commits as ONE batch (caller holds ``lock``).

        Each commit gets its own log record and the next seq; the head moves to the last. The
        records are published on ``hub`` once the batch is durable.
        """
        ctx = current_commit_context()
        seq = self.log.head()
        batch: dict[bytes, bytes] = {}
        all_deletes: list[bytes] = []
        records: list[CommitRecord] = []
        for record_fields, puts, deletes in commits:
            seq += 1
            fields = dict(record_fields)
            if ctx.operation and fields.get("operation") not in _OWN_OPERATIONS:
                fields["operation"] = ctx.operation
            extra = {**ctx.extra, **fields.pop("extra", {})}
            # A writer that knows exactly which rows it changed (SQL UPDATE / DELETE) says so;
            # the snapshot summary only gives net counts for a copy-on-write rewrite.
            exact = extra.pop("row_counts", None)
            if isinstance(exact, dict) and "snapshot_id" in fields:
                fields["added_rows"], fields["deleted_rows"] = int(exact["added"]), int(exact["deleted"])
            if extra.get("maintenance") and "snapshot_id" in fields:
                # Compaction and manifest merges change no row a reader sees (a compaction that
                # applies delete files drops deleted rows that no reader saw).
                fields.update(data_change=False, added_rows=0, deleted_rows=0)
            record = CommitRecord(
                seq=seq,
                committed_at_us=now_us(),
                principal=ctx.principal,
                extra=extra,
                **fields,
            )
            batch.update(puts)
            # Writes that must land atomically with this commit (idempotency keys of appends).
            batch.update(batch_extras(record))
            batch[keys.log_key(seq)] = record.to_bytes()
            all_deletes.extend(deletes)
            records.append(record)
        batch[keys.HEAD_SEQ] = keys.encode_u64(seq)
        self.store.write(batch, tuple(all_deletes))
        # Published while the commit lock is still held, so subscribers and listeners (the
        # feed, lineage) receive records in sequence order. Publishing never blocks.
        for record in records:
            self.hub.publish(record)
        return records

    def trim_log(self, retain_count: int | None, retain_age_s: int | None, at_us: int | None = None) -> int:
        """Drop log records beyond the newest ``retain_count`` or older than ``retain_age_s``
        (whichever drops more; never one above the lowest hold); return the new log start."""
        with self.lock:
            keep_after = self.log.head() - retain_count if retain_count is not None else 0
            if retain_age_s is not None:
                now = at_us if at_us is not None else now_us()
                keep_after = max(keep_after, self.log.last_seq_before(now - retain_age_s * 1_000_000))
            return self.log.trim(keep_after)
