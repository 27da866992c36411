"""The ingest runner: drives one connector into one table, exactly once.

Each pass (``run_once``) reads the connector's checkpoint back from the target table (the
snapshot summary written by its last commit, ``catalog.ingest_checkpoints``), opens the
connector there, and commits what it reads in commits of about ``max_rows`` rows. Every commit
carries the rows and the new checkpoint together (the sink lands both in one catalog commit),
so whatever happens between a read and a commit - a crash, ``kill -9``, a lost race - the next
pass starts exactly after the last commit that landed: no gap, no duplicate.

The runner never commits part of a source transaction (``Envelope.transaction_end``), never
takes an envelope whose position does not move past the checkpoint (a stalled cursor: reported,
not re-ingested), and sends envelopes of different schemas through the target's schema policy
(``catalog.schema_policy``) one schema at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from catalog.ingest_checkpoints import IngestCommit, StoredCheckpoint, backfill_name
from icefloe.ingest.changes import fold, keyed, truncated
from icefloe.ingest.contract import (
    BackfillRange,
    Checkpoint,
    Connector,
    ConnectorError,
    Envelope,
    Health,
    SourceUnavailable,
    State,
)

logger = logging.getLogger("icefloe.ingest.runner")

DEFAULT_MAX_ROWS = 1_000_000
MAX_BACKOFF_S = 60.0


@dataclass(frozen=True)
class CommitOutcome:
    seq: int
    rows: int
    duplicate: bool


@dataclass(frozen=True)
class TableChange:
    """One target table's part of a commit of a connector that feeds several tables."""

    table: str
    upserts: pa.Table
    removed: pa.Table
    key: tuple[str, ...]
    truncate: bool = False


class Sink(Protocol):
    """Where a runner commits: the target table (``icefloe.ingest.sink.CatalogSink``)."""

    table: str

    def checkpoint(self, name: str) -> StoredCheckpoint:
        """The connector checkpoint ``name`` as landed in the table (step 0: none)."""

    def commit(self, rows: pa.Table, commit: IngestCommit) -> CommitOutcome:
        """Append ``rows`` and ``commit``'s checkpoint in one durable catalog commit.

        Raises:
            Exception: Nothing was committed (schema refused, commit conflict, ...).
        """

    def commit_changes(self, upserts: pa.Table, removed: pa.Table, key: tuple[str, ...],
                       commit: IngestCommit, truncate: bool = False) -> CommitOutcome:
        """Delete the rows of every key in ``upserts`` and ``removed`` (``truncate``: every
        row), append ``upserts``, with ``commit``'s checkpoint: one durable catalog commit (a
        CDC connector's changes)."""

    def commit_tables(self, parts: list[TableChange], commit: IngestCommit,
                      sources: dict[str, tuple[str, str]]) -> CommitOutcome:
        """Every table's changes (as ``commit_changes``) and the checkpoint in ONE durable
        catalog commit (a connector feeding several tables: envelopes name their ``table``)."""


@dataclass
class RunStats:
    """What one pass did."""

    rows: int = 0
    commits: int = 0
    envelopes: int = 0
    duplicates: int = 0
    stalled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "commits": self.commits, "envelopes": self.envelopes,
                "duplicates": self.duplicates, "stalled": self.stalled}


@dataclass
class RunnerStatus:
    """Counters and the last known state, read by status and metrics from other threads."""

    state: State = State.STARTING
    message: str = ""
    rows: int = 0
    commits: int = 0
    step: int = 0
    positions: dict[str, str] = field(default_factory=dict)
    last_commit_seq: int | None = None
    last_commit_at: float | None = None
    lag_seconds: float = 0.0
    pending: int | None = None
    passes: int = 0  # passes finished (ok or not) since start


class IngestRunner:
    """One connector feeding one table.

    Args:
        name: The connector's name (its checkpoint's name in the table).
        connector: The source.
        sink: The target table.
        max_rows: Rows per commit (soft: whole envelopes and transactions).
        on_commit: Called after each commit landed (metrics), with (rows, lag seconds).
    """

    def __init__(self, name: str, connector: Connector, sink: Sink, max_rows: int = DEFAULT_MAX_ROWS,
                 on_commit: Callable[[int, float], None] | None = None) -> None:
        self.name = name
        self.connector = connector
        self.sink = sink
        self.max_rows = max_rows
        self._on_commit = on_commit
        self._run_lock = threading.Lock()  # one pass at a time (server thread and CLI run)
        self._status_lock = threading.Lock()
        self._status = RunnerStatus()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold off passes for the block (waits for one in flight)."""
        with self._run_lock:
            yield

    # -- status --------------------------------------------------------------------------

    def status(self) -> RunnerStatus:
        health = self.connector.health()
        with self._status_lock:
            status = RunnerStatus(**{**self._status.__dict__, "positions": dict(self._status.positions)})
        if status.state not in (State.FAILED, State.PAUSED, State.STALLED) and health.state is not State.STARTING:
            status.state, status.message = health.state, health.message
        status.pending = health.pending
        return status

    def set_state(self, state: State, message: str = "") -> None:
        with self._status_lock:
            self._status.state, self._status.message = state, message

    # -- passes ---------------------------------------------------------------------------

    def run_once(self, backfill: BackfillRange | None = None) -> RunStats:
        """Ingest everything the source has now (or the ``backfill`` range), then return.

        Raises:
            SourceUnavailable: The source is down (state ``down``; the checkpoint stays).
            ConnectorError: The source's data or the connector failed (state ``failed``).
            Exception: The target refused the rows (state ``failed``; e.g. a schema the
                table's policy does not allow): nothing of it was committed.
        """
        with self._run_lock:
            try:
                return self._run_once(backfill)
            finally:
                with self._status_lock:
                    self._status.passes += 1

    def _run_once(self, backfill: BackfillRange | None) -> RunStats:
        try:
            while True:
                try:
                    stats = self._pass(backfill)
                    break
                except _Reopen as moved:  # another runner moved the checkpoint: start from there
                    logger.info("ingest %s: continuing from step %d committed by another runner", self.name,
                                moved.step)
        except SourceUnavailable as exc:
            self.set_state(State.DOWN, str(exc))
            raise
        except Exception as exc:
            self.set_state(State.FAILED, _first_line(exc))
            raise
        if stats.stalled:
            self.set_state(State.STALLED, "the source's cursor stopped advancing; nothing was taken twice")
        else:
            self.set_state(State.UP)
        return stats

    def _pass(self, backfill: BackfillRange | None) -> RunStats:
        checkpoint_name = backfill_name(self.name, backfill.start, backfill.end) if backfill else self.name
        stats = RunStats()
        stored = self.sink.checkpoint(checkpoint_name)
        step, durable = stored.step, Checkpoint(stored.positions)
        self.connector.open(durable, backfill)
        if backfill is None:
            self._remember(step, durable.positions)
        pending: list[Envelope] = []  # read, not committed; pending[:boundary] are whole transactions
        boundary = 0
        pending_rows = 0  # rows in pending
        schemas: list[tuple[str | None, pa.Schema]] = []  # the distinct schemas of pending's rows, per table
        checkpoint = durable  # durable advanced by everything pending
        while True:
            got, stop = 0, ""
            reader = self.connector.read(self.max_rows)
            try:
                for envelope in reader:
                    got += 1
                    if envelope.rows.num_rows and checkpoint.get(envelope.partition) == envelope.position:
                        stats.stalled, stop = True, "stalled"
                        break
                    if pending and boundary == len(pending) and not _fits(schemas, envelope):
                        step, durable = self._commit(checkpoint_name, step, pending, durable, checkpoint, stats,
                                                     backfill)
                        pending, boundary, checkpoint, pending_rows, schemas = [], 0, durable, 0, []
                    pending.append(envelope)
                    # Kept as we go: recounting ``pending`` per envelope is quadratic for a CDC
                    # stream of many one-row transactions.
                    pending_rows += envelope.rows.num_rows
                    _add_schema(schemas, envelope)
                    checkpoint = checkpoint.advanced(envelope)
                    stats.envelopes += 1
                    if envelope.transaction_end:
                        boundary = len(pending)
                        if pending_rows >= self.max_rows:
                            stop = "full"
                            break
            finally:
                close = getattr(reader, "close", None)
                if close is not None:
                    close()
            if boundary:
                whole_checkpoint = durable
                for envelope in pending[:boundary]:
                    whole_checkpoint = whole_checkpoint.advanced(envelope)
                step, durable = self._commit(checkpoint_name, step, pending[:boundary], durable, whole_checkpoint,
                                             stats, backfill)
                pending, boundary = pending[boundary:], 0
                pending_rows = sum(e.rows.num_rows for e in pending)
                schemas = []
                for envelope in pending:
                    _add_schema(schemas, envelope)
                checkpoint = durable
                for envelope in pending:
                    checkpoint = checkpoint.advanced(envelope)
            if stop == "full":
                # The runner stopped reading mid-way: reposition the connector after what it holds
                # (whatever the connector had advanced in the envelope it was about to yield).
                self.connector.open(checkpoint, backfill)
                continue
            if stop == "stalled" or got == 0:
                if pending:
                    # An unfinished source transaction: read it again, whole, next time.
                    self.connector.open(durable, backfill)
                return stats

    def _commit(self, checkpoint_name: str, step: int, envelopes: list[Envelope], durable: Checkpoint,
                checkpoint: Checkpoint, stats: RunStats, backfill: BackfillRange | None) -> tuple[int, Checkpoint]:
        """Flush ``envelopes``; on a duplicate (another runner committed from ``step`` first), go
        on from the checkpoint that runner committed."""
        new_step, new_durable = self._flush(checkpoint_name, step, envelopes, durable, checkpoint, stats, backfill)
        if new_step != step or not any(e.rows.num_rows for e in envelopes):
            return new_step, new_durable
        stored = self.sink.checkpoint(checkpoint_name)
        if stored.step <= step:
            # Judged a duplicate, yet the table holds no later checkpoint (its snapshot was
            # removed by another tool): stop rather than loop or guess.
            raise CheckpointLost(f"ingest {self.name}: step {step} was committed before but the table no longer "
                                 "holds that checkpoint; nothing was committed now")
        raise _Reopen(stored.step, Checkpoint(stored.positions))

    def _flush(self, checkpoint_name: str, step: int, envelopes: list[Envelope], durable: Checkpoint,
               checkpoint: Checkpoint, stats: RunStats, backfill: BackfillRange | None) -> tuple[int, Checkpoint]:
        """Commit ``envelopes`` with ``checkpoint``; answer the (step, checkpoint) now durable."""
        tables = [e.rows for e in envelopes if e.rows.num_rows]
        truncate = truncated(envelopes)
        if not tables and not truncate:
            # Positions moved without data (empty files or pages): nothing to commit now; the
            # next commit carries them, and a restart before it reads them again, finding
            # nothing again. A source that holds data for us until told (a replication slot
            # keeping WAL) is told once the positions are durable beside the last commit.
            note = getattr(self.sink, "note_idle", None)
            if (backfill is None and self.connector.confirms_idle and note is not None
                    and checkpoint.positions != durable.positions):
                note(checkpoint_name, step, dict(checkpoint.positions))
                self._remember(step, checkpoint.positions)
                try:
                    self.connector.committed(checkpoint)
                except Exception:
                    logger.warning("ingest %s: the connector's committed() hook failed", self.name, exc_info=True)
            return step, checkpoint
        if any(e.table is not None for e in envelopes):  # a connector feeding several tables
            parts = _table_changes(envelopes)
            count = sum(p.upserts.num_rows for p in parts)
            commit = IngestCommit(checkpoint_name, step, checkpoint.positions, _dataset(self.connector.source_uri()),
                                  backfill=backfill is not None,
                                  stats={"rows": count, "deleted_keys": sum(p.removed.num_rows for p in parts),
                                         "tables": len(parts)})
            sources = {t: _dataset(uri) for t, uri in self.connector.table_sources().items()}
            outcome = self.sink.commit_tables(parts, commit, sources)
        elif keyed(envelopes):  # CDC: row-level changes by key (updates, deletes) in one commit
            upserts, removed, key = fold(envelopes)
            count = upserts.num_rows
            commit = IngestCommit(checkpoint_name, step, checkpoint.positions, _dataset(self.connector.source_uri()),
                                  backfill=backfill is not None,
                                  stats={"rows": upserts.num_rows, "deleted_keys": removed.num_rows,
                                         **({"truncated": True} if truncate else {})})
            outcome = self.sink.commit_changes(upserts, removed, key, commit, truncate)
        else:
            rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
            count = rows.num_rows
            commit = IngestCommit(checkpoint_name, step, checkpoint.positions, _dataset(self.connector.source_uri()),
                                  backfill=backfill is not None, stats={"rows": count})
            outcome = self.sink.commit(rows, commit)
        if outcome.duplicate:
            stats.duplicates += 1
            logger.info("ingest %s: another runner committed from step %d first", self.name, step)
            return step, durable
        lag = _lag(envelopes)
        stats.rows += count
        stats.commits += 1
        try:
            self.connector.committed(checkpoint)
        except Exception:  # the commit landed: a failing hook must not undo the bookkeeping
            logger.warning("ingest %s: the connector's committed() hook failed", self.name, exc_info=True)
        with self._status_lock:
            self._status.rows += count
            self._status.commits += 1
            self._status.last_commit_seq = outcome.seq
            self._status.last_commit_at = time.time()
            self._status.lag_seconds = lag
        if backfill is None:
            self._remember(step + 1, checkpoint.positions)
        if self._on_commit is not None:
            self._on_commit(count, lag)
        return step + 1, checkpoint

    def _remember(self, step: int, positions: dict[str, str] | Any) -> None:
        with self._status_lock:
            self._status.step, self._status.positions = step, dict(positions)

    # -- continuous running --------------------------------------------------------------------

    def run_forever(self, stop: threading.Event, poll_s: float = 1.0,
                    paused: Callable[[], bool] = lambda: False) -> None:
        """Pass after pass until ``stop``; back off while the source is down or failing."""
        backoff = poll_s
        while not stop.is_set():
            if paused():
                self.set_state(State.PAUSED)
                stop.wait(poll_s)
                continue
            try:
                self.run_once()
            except SourceUnavailable as exc:
                logger.info("ingest %s: source down (%s); retrying in %.1fs", self.name, exc, backoff)
                backoff = min(max(backoff * 2, poll_s), MAX_BACKOFF_S)
            except ConnectorError as exc:
                logger.warning("ingest %s failed: %s; retrying in %.1fs", self.name, exc, MAX_BACKOFF_S)
                backoff = MAX_BACKOFF_S
            except Exception as exc:
                logger.warning("ingest %s: commit refused: %s; retrying in %.1fs", self.name, _first_line(exc),
                               MAX_BACKOFF_S)
                backoff = MAX_BACKOFF_S
            else:
                # Caught up: until the source may have more (a streaming source wakes this
                # as soon as it sends), or poll_s at most.
                backoff = poll_s
                self.connector.wait(poll_s, stop)
                continue
            stop.wait(backoff)


class _Reopen(Exception):
    """Another runner committed from the same checkpoint first: the pass starts again from its."""

    def __init__(self, step: int, checkpoint: Checkpoint) -> None:
        super().__init__(step)
        self.step, self.checkpoint = step, checkpoint


class CheckpointLost(ConnectorError):
    """The target no longer holds the checkpoint a commit was judged a duplicate of."""


def _fits(schemas: list[tuple[str | None, pa.Schema]], envelope: Envelope) -> bool:
    """Whether ``envelope`` can share a commit with pending envelopes of ``schemas`` (per target
    table): the same schema (rows of another schema go through the table's schema policy in a
    commit of their own)."""
    if not envelope.rows.num_rows:
        return True
    return all(x.equals(envelope.rows.schema) for t, x in schemas if t == envelope.table)


def _add_schema(schemas: list[tuple[str | None, pa.Schema]], envelope: Envelope) -> None:
    if envelope.rows.num_rows and not any(t == envelope.table and x.equals(envelope.rows.schema)
                                          for t, x in schemas):
        schemas.append((envelope.table, envelope.rows.schema))


def _table_changes(envelopes: list[Envelope]) -> list[TableChange]:
    """Per target table named by ``envelopes`` (in first-seen order), its folded changes."""
    labels: list[str] = []
    for envelope in envelopes:
        if envelope.table is not None and envelope.table not in labels:
            labels.append(envelope.table)
    parts = []
    for label in labels:
        group = [e for e in envelopes if e.table == label]
        cut = truncated(group)
        if not cut and not any(e.rows.num_rows for e in group):
            continue
        upserts, removed, key = fold(group)
        parts.append(TableChange(label, upserts, removed, key, cut))
    return parts


def _lag(envelopes: list[Envelope]) -> float:
    times = [e.source_time_us for e in envelopes if e.source_time_us is not None]
    return max(0.0, time.time() - min(times) / 1e6) if times else 0.0


def _dataset(uri: str) -> tuple[str, str]:
    """OpenLineage dataset naming: local files are namespace ``file`` and the absolute path;
    object stores ``s3://bucket`` and the key prefix; anything else ``scheme://authority`` and
    the path."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "icefloe-ingest", uri
    authority, _, path = rest.partition("/")
    if scheme == "file":
        return "file", "/" + path
    if scheme in ("s3", "s3a", "gs", "abfss"):
        return f"{scheme}://{authority}", path
    return f"{scheme}://{authority}", "/" + path


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return (text.splitlines()[0] if text else type(exc).__name__)[:500]


def health_json(health: Health) -> dict[str, Any]:
    return {"state": health.state.value, "message": health.message, "pending": health.pending}
