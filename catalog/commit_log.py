"""The durable commit log: one record per table commit, keyed by a big-endian sequence.

The log is the outbox for the feed and for lineage: a record exists exactly when its commit
landed, because it is written in the same fsync'd RocksDB batch as the table pointer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog import keys
from catalog.store import RocksStore


@dataclass(frozen=True)
class CommitRecord:
    """One landed commit.

    ``committed_at_us`` is microseconds since the Unix epoch (UTC).
    """

    seq: int
    committed_at_us: int
    namespace: tuple[str, ...]
    table: str
    table_uuid: str | None
    operation: str
    snapshot_id: int | None = None
    parent_snapshot_id: int | None = None
    added_rows: int | None = None
    deleted_rows: int | None = None
    added_files: int | None = None
    metadata_location: str | None = None
    principal: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        return ".".join((*self.namespace, self.table))

    def to_bytes(self) -> bytes:
        body = asdict(self)
        body["namespace"] = list(self.namespace)
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> CommitRecord:
        body = json.loads(raw)
        body["namespace"] = tuple(body["namespace"])
        return cls(**body)


class CursorExpiredError(LookupError):
    """A reader asked for records older than the retained log."""

    def __init__(self, after: int, log_start: int) -> None:
        super().__init__(f"cursor expired: log starts at {log_start}")
        self.after = after
        self.log_start = log_start


class CommitLog:
    """Read access and retention for the commit log stored in a ``RocksStore``."""

    def __init__(self, store: RocksStore) -> None:
        self._store = store

    def head(self) -> int:
        """Sequence number of the latest landed commit (0 when nothing has been committed)."""
        return keys.decode_u64(self._store.get(keys.HEAD_SEQ), 0)

    def log_start(self) -> int:
        """Sequence number of the oldest retained record (head + 1 when the log is empty)."""
        return keys.decode_u64(self._store.get(keys.LOG_START), 1)

    def read(self, after: int, limit: int | None = None) -> Iterator[CommitRecord]:
        """Yield records with ``seq > after`` in sequence order.

        Raises:
            CursorExpiredError: If records after ``after`` have already been trimmed.
        """
        start = self.log_start()
        if after < start - 1:
            raise CursorExpiredError(after, start)
        count = 0
        for _, value in self._store.scan(keys.LOG, keys.log_key(after + 1)):
            yield CommitRecord.from_bytes(value)
            count += 1
            if limit is not None and count >= limit:
                return

    def get(self, seq: int) -> CommitRecord | None:
        raw = self._store.get(keys.log_key(seq))
        return CommitRecord.from_bytes(raw) if raw is not None else None

    def retention_floor(self) -> int | None:
        """Lowest retention hold (e.g. the lineage cursor): records above it must stay."""
        holds = [keys.decode_u64(v) for _, v in self._store.scan(keys.RETENTION_HOLD)]
        return min(holds) if holds else None

    def trim(self, keep_after: int) -> int:
        """Drop records with ``seq <= keep_after``; return the new log start.

        The caller decides how much to keep (time or count based retention); retention holds
        (``keys.RETENTION_HOLD``, such as the lineage outbox cursor) are always honoured: no
        record above the lowest hold is dropped.
        """
        head = self.head()
        keep_after = min(keep_after, head)
        floor = self.retention_floor()
        if floor is not None:
            keep_after = min(keep_after, floor)
        current = self.log_start()
        if keep_after < current:
            return current
        # Move the start first: a crash in between leaves dead records below the start,
        # never a start that points past records a reader could still be handed.
        self._store.write({keys.LOG_START: keys.encode_u64(keep_after + 1)})
        self._store.delete_range(keys.log_key(current), keys.log_key(keep_after + 1))
        return keep_after + 1
