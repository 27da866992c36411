"""``icefloe.pipe``: a source table's appends -> transform -> a sink table, exactly once.

Each step reads the source's rows in ``(checkpoint, until]`` (a change scan), transforms them
and appends the result to the sink with a ``PipeCommit``: the new checkpoint ``until`` lands
in the sink snapshot's summary in the same commit as the rows, so a crash anywhere leaves
either both or neither. On start the checkpoint is read back from the sink's snapshots. The
step's idempotency key names the checkpoint it started from, so two runs of one pipe cannot
both extend the same checkpoint; the loser re-reads the checkpoint and goes on from there.

A range with no rows for the sink commits nothing; the in-memory checkpoint moves on and, after
a restart, such a range is read again, yielding nothing again. Snapshot expiry keeps the sink
snapshot holding each pipe's highest checkpoint (``catalog.pipes.checkpoint_snapshots``), so a
pipe paused for any time resumes at its place; ``CheckpointLost`` is raised, rather than rows
replayed, only when that snapshot was removed by other means (another Iceberg tool).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from catalog.pipes import PipeCommit, checkpoint_from_summaries
from icefloe.errors import CheckpointLost, InvalidArgument
from icefloe.lake import COMMIT_COLUMNS, Table, as_reader

logger = logging.getLogger("icefloe.pipe")

Transform = Callable[[pa.Table], Any]


@dataclass
class PipeStats:
    """What a pipe run did."""

    checkpoint: int  # the last source seq processed
    source_rows: int = 0
    sink_rows: int = 0
    commits: int = 0


def checkpoint_of(sink: Table, name: str) -> int | None:
    """The checkpoint pipe ``name`` committed to ``sink`` (None: it never committed)."""
    return checkpoint_from_summaries(name, sink.backend.snapshot_summaries(sink.name))


def pipe(
    source: Table,
    sink: Table,
    checkpoint: str,
    transform: Transform | None = None,
    columns: Mapping[str, Sequence[str]] | None = None,
    *,
    once: bool = False,
    start: int | str = "earliest",
    max_commits: int = 1000,
    stop: threading.Event | None = None,
) -> PipeStats:
    """Move every row appended to ``source`` through ``transform`` into ``sink``, exactly once.

    Args:
        source: The table whose appends are read.
        sink: The table the transformed rows are appended to.
        checkpoint: The pipe's name; its progress is stored in the sink under it.
        transform: Arrow in (a ``pyarrow.Table`` of the source's columns), Arrow out (anything
            with ``__arrow_c_stream__`` / ``__arrow_c_array__``, or None for no rows); None
            passes rows through.
        columns: Column lineage for OpenLineage, sink column -> source columns (omitted: none
            is reported).
        once: Return when the source's commits up to now are processed; else follow live.
        start: Where a pipe without a checkpoint starts: ``"earliest"``, ``"latest"`` or a seq.
        max_commits: At most this many lake commits (by seq) per sink commit.
        stop: Set it to end a live pipe after its current step.

    Returns:
        ``PipeStats`` of this run.

    Raises:
        CheckpointLost: The sink no longer holds the checkpoint this pipe committed.
        CursorExpired: The source's log no longer holds the rows after the checkpoint.
        InvalidArgument: A bad name, ``columns`` or ``max_commits``, or a transform result
            that is not Arrow data or does not fit the sink.
        Error: Any other error of either table.
    """
    if max_commits < 1:
        raise InvalidArgument("max_commits must be at least 1")
    found = checkpoint_of(sink, checkpoint)
    if found is not None:
        committed = found
    elif start == "earliest":
        committed = 0
    elif start == "latest":
        committed = source.backend.head()
    elif isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        committed = start
    else:
        raise InvalidArgument(f"start must be 'earliest', 'latest' or a commit seq, not {start!r}")
    _commit(checkpoint, source, committed + 1, committed, columns)  # validates the arguments now
    stats = PipeStats(committed)
    logger.info("pipe %s: %s -> %s from seq %d", checkpoint, source.name, sink.name, committed)
    # Once: up to the head as it is now (the pipe's own sink commits move the head on).
    target = source.backend.head() if once else None
    while stop is None or not stop.is_set():
        head = target if target is not None else source.backend.head()
        if head > stats.checkpoint:
            until = min(head, stats.checkpoint + max_commits)
            _step(source, sink, checkpoint, transform, columns, stats, until)
            continue
        if once:
            break
        for event in source.subscribe(after=stats.checkpoint, stop=stop):
            if event.seq > stats.checkpoint:
                break  # something new: the next step reads up to the head
    return stats


def _commit(name: str, source: Table, until: int, after: int,
            columns: Mapping[str, Sequence[str]] | None) -> PipeCommit:
    try:
        return PipeCommit(name, source.name, until, after, {t: tuple(s) for t, s in (columns or {}).items()})
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(str(exc)) from None


def _step(source: Table, sink: Table, name: str, transform: Transform | None,
          columns: Mapping[str, Sequence[str]] | None, stats: PipeStats, until: int) -> None:
    """Process ``(stats.checkpoint, until]``."""
    after = stats.checkpoint
    rows = source.changes(after=after, until=until).read_all()
    rows = rows.drop_columns([c for c in COMMIT_COLUMNS if c in rows.column_names])
    out = (transform(rows) if transform is not None else rows) if rows.num_rows else None
    reader = as_reader(out) if out is not None else None
    if reader is None:
        stats.checkpoint = until
        return
    step = _commit(name, source, until, after, columns)
    event = sink.backend.append(sink.name, reader, step.idempotency_key(), step)
    if event.duplicate:
        # Another run of this pipe extended this checkpoint first: go on from what it committed.
        found = checkpoint_of(sink, name)
        if found is None or found <= after:
            raise CheckpointLost(
                f"pipe {name!r} committed after seq {after} before, but {sink.name} no longer holds its checkpoint "
                "(its snapshot was expired); restart the pipe with an explicit start"
            )
        logger.info("pipe %s: checkpoint %d was already extended to %d; continuing there", name, after, found)
        stats.checkpoint = found
        return
    stats.checkpoint = until
    stats.source_rows += rows.num_rows
    stats.sink_rows += event.rows
    stats.commits += 1
