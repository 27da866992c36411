"""The durable commit log: one record per table commit, keyed by a big-endian sequence.

The log is the outbox for the feed and for lineage: a record exists exactly when its commit
landed, because it is written in the same fsync'd RocksDB batch as the table pointer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog import keys
from catalog.store import RocksStore

logger = logging.getLogger("icefloe.catalog.commit_log")


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
    # Data and delete files the commit removed; False for commits that change no row
    # (compaction, expiry, schema). None in records written before these were kept.
    removed_files: int | None = None
    data_change: bool | None = None

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
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in body.items() if k in known})  # a newer writer's fields are skipped


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
        # Holders that can catch up on the spot (the lineage index) do so before a trim, so
        # that their hold does not keep records a trim was asked to drop.
        self.before_trim: list[Callable[[], None]] = []

    def head(self) -> int:
        """Sequence number of the latest landed commit (0 when nothing has been committed)."""
        self._store.refresh()  # a read-only (secondary) store catches up with the writer first
        return keys.decode_u64(self._store.get(keys.HEAD_SEQ), 0)

    def log_start(self) -> int:
        """Sequence number of the oldest retained record (head + 1 when the log is empty)."""
        self._store.refresh()
        return keys.decode_u64(self._store.get(keys.LOG_START), 1)

    def read(self, after: int, limit: int | None = None) -> Iterator[CommitRecord]:
        """Yield records with ``seq > after`` in sequence order, without gaps.

        Raises:
            CursorExpiredError: If records after ``after`` have already been trimmed (also
                when a trim races with this read: the first record must be ``after + 1``).
        """
        start = self.log_start()
        if after < start - 1:
            raise CursorExpiredError(after, start)
        expected = after + 1
        for _, value in self._store.scan(keys.LOG, keys.log_key(after + 1)):
            record = CommitRecord.from_bytes(value)
            if record.seq != expected:
                raise CursorExpiredError(after, self.log_start())
            yield record
            expected += 1
            if limit is not None and expected - after > limit:
                return

    def get(self, seq: int) -> CommitRecord | None:
        raw = self._store.get(keys.log_key(seq))
        return CommitRecord.from_bytes(raw) if raw is not None else None

    # -- holds -------------------------------------------------------------------------

    def holds(self) -> dict[str, int]:
        """Every registered hold: name -> the last seq its holder has processed."""
        return {
            key[len(keys.HOLD) :].decode("utf-8"): keys.decode_u64(value) for key, value in self._store.scan(keys.HOLD)
        }

    def set_hold(self, name: str, seq: int) -> None:
        """Keep every record after ``seq`` until the hold named ``name`` moves on or is released.

        A holder (the lineage outbox, a durable consumer) calls this with the last seq it has
        fully processed; ``trim`` never drops a record above the lowest hold. Holds are stored
        in the catalog database: creating one is fsync'd, moving one is not (after a crash it
        reads back at an older seq, which only keeps more).

        Raises:
            CursorExpiredError: If records after ``seq`` were already trimmed.
            ValueError: If ``name`` is empty or ``seq`` is negative or past the head.
        """
        if not name or seq < 0:
            raise ValueError("a hold needs a name and a non-negative seq")
        if seq > self.head():
            raise ValueError(f"hold {name!r} at {seq} is past the head of the log ({self.head()})")
        start = self.log_start()
        if seq < start - 1:
            raise CursorExpiredError(seq, start)
        key = keys.hold_key(name)
        created = self._store.get(key) is None
        self._store.write({key: keys.encode_u64(seq)}, sync=created)

    def release_hold(self, name: str) -> None:
        """Remove a hold (no error if it does not exist)."""
        self._store.write({}, (keys.hold_key(name),))

    # -- retention ---------------------------------------------------------------------

    def trim(self, keep_after: int) -> int:
        """Drop records with ``seq <= keep_after``; return the new log start.

        Never trims past the lowest hold (see ``set_hold``). Time or count based retention
        is decided by the caller (``RocksCatalog.trim_commit_log``).
        """
        for catch_up in list(self.before_trim):
            try:
                catch_up()
            except Exception:  # its hold stays where it is: trim keeps more, never less
                logger.warning("a commit-log holder could not catch up before a trim", exc_info=True)
        head = self.head()
        keep_after = min([keep_after, head, *self.holds().values()])
        current = self.log_start()
        if keep_after < current:
            return current
        # Move the start first: a crash in between leaves dead records below the start,
        # never a start that points past records a reader could still be handed.
        self._store.write({keys.LOG_START: keys.encode_u64(keep_after + 1)})
        self._store.delete_range(keys.log_key(current), keys.log_key(keep_after + 1))
        return keep_after + 1

    def last_seq_before(self, committed_at_us: int) -> int:
        """Highest retained seq committed before ``committed_at_us`` (log start - 1 if none)."""
        last = self.log_start() - 1
        for _, value in self._store.scan(keys.LOG, keys.log_key(last + 1)):
            record = CommitRecord.from_bytes(value)
            if record.committed_at_us >= committed_at_us:
                break
            last = record.seq
        return last
