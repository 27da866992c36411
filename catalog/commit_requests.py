"""Commit requests and the per-table committer of group commit (``catalog.append``).

Every write that lands through a table's commit slot is a ``CommitRequest``: data files, row
count, idempotency key, and what the writer adds to its commit (summary properties, a ``prepare``
run in the slot, batch writes, a snapshot producer, quarantined rows). A table's
``TableCommitter`` serialises them: appends that queue while a commit is in flight are folded
into the next snapshot by its leader (``Appender.commit_group``); requests that carry anything
of their own land alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from catalog.append_schema import StagedSchema
from catalog.commit_log import CommitRecord
from catalog.durable_io import PendingSync
from catalog.idempotency import encode_result, idempotency_key
from catalog.quarantine import QuarantineFiles


class GroupCommitter(Protocol):
    """What lands a group of requests (``catalog.append.Appender``), holding the table's slot."""

    def commit_group(self, namespace: tuple[str, ...], name: str, group: list[CommitRequest]) -> None: ...


@dataclass
class AppendResult:
    """What a writer is told once its rows are durable."""

    table: str
    commit_seq: int
    snapshot_id: int | None
    rows: int
    duplicate: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "commit_seq": self.commit_seq,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows,
            "duplicate": self.duplicate,
        }


@dataclass
class CommitRequest:
    data_files: list[DataFile]
    rows: int
    key: str | None
    principal: str | None
    staged_schema: StagedSchema | None = None
    # Set by pipes (catalog.pipes): summary properties of the new snapshot; such a request
    # lands in a commit of its own, never coalesced.
    snapshot_properties: dict[str, str] = field(default_factory=dict)
    # A commit of staged appends (two_phase.py) lands alone: ``prepare`` runs in the table's
    # commit slot first (it checks the stagings and fills ``data_files``), ``batch_writes``
    # adds its records to the commit's RocksDB batch, ``extra`` to its commit-log record.
    prepare: Callable[[], None] | None = None
    batch_writes: Callable[[CommitRecord], dict[bytes, bytes]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The data files' fsyncs, started as soon as the files are written (they run while the
    # request waits for its group and the commit builds its metadata); the commit waits.
    syncing: PendingSync | None = None
    # Set by two_phase.py's overwrite: makes the snapshot producer from ``tx.update_snapshot(...)``
    # and the table as loaded for this attempt (default ``fast_append()``); such a request lands alone.
    producer: Callable[[Any, Table], Any] | None = None
    # Rows the quality gate quarantined: their table's snapshot lands in this commit's batch.
    quarantine: QuarantineFiles | None = None
    result: AppendResult | None = None
    error: BaseException | None = None
    done: bool = False

    @property
    def alone(self) -> bool:
        return (self.staged_schema is not None or self.prepare is not None or self.producer is not None
                or bool(self.snapshot_properties) or self.quarantine is not None)


@dataclass
class _Pending:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[CommitRequest] = field(default_factory=list)


class TableCommitter:
    """Serialises commits to one table and coalesces queued appends (leader/follower)."""

    def __init__(self, appender: GroupCommitter, namespace: tuple[str, ...], table: str) -> None:
        self._appender = appender
        self.namespace = namespace
        self.table = table
        self._leader = threading.Lock()
        self._pending = _Pending()

    def submit(self, request: CommitRequest) -> AppendResult:
        with self._pending.lock:
            self._pending.requests.append(request)
        with self._leader:
            if not request.done:
                with self._pending.lock:
                    group, self._pending.requests = self._pending.requests, []
                try:
                    self._appender.commit_group(self.namespace, self.table, group)
                except BaseException as exc:
                    for req in group:
                        if not req.done:
                            req.error, req.done = exc, True
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the table's commit slot (schema changes, maintenance commits)."""
        with self._leader:
            yield


def key_writes(
    namespace: tuple[str, ...], name: str, record: CommitRecord, writers: list[tuple[str | None, int]]
) -> dict[bytes, bytes]:
    """Idempotency records (key -> this writer's result) to land in ``record``'s commit batch."""
    qualified = ".".join((*namespace, name))
    return {
        idempotency_key(namespace, name, key): encode_result(
            AppendResult(qualified, record.seq, record.snapshot_id, rows).to_json()
        )
        for key, rows in writers
        if key is not None
    }
