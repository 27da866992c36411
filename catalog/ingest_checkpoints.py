"""Ingest checkpoints: a connector's source positions, landed in the same commit as its rows.

This is the pipe checkpoint mechanism (``catalog.pipes``) applied to external sources. A pipe's
checkpoint is one source commit seq; a connector's is a map partition -> opaque position
(``icefloe.ingest.contract.Checkpoint``). Both go into the new snapshot's summary properties,
so they land in the one fsync'd RocksDB batch that moves the table pointer: a crash leaves the
rows and the checkpoint both committed or both not.

Two summary properties per connector:

* ``icefloe.ingest.<name>.step`` - how many commits this connector has made (1, 2, ...). The
  checkpoint of a connector is the one in the snapshot with the highest step, as a pipe's is
  the highest seq; snapshot expiry keeps that snapshot (``catalog.pipes.checkpoint_snapshots``
  recognises the property), so a connector paused for any time resumes at its place.
* ``icefloe.ingest.<name>.checkpoint`` - the positions, as compact JSON.

The commit's idempotency key names the step it started from, so two runners of one connector
(a server thread and a CLI ``run``, two servers) cannot both commit from the same checkpoint:
the second gets ``duplicate`` and re-reads the checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PROPERTY_PREFIX = "icefloe.ingest."
STEP_SUFFIX = ".step"
CHECKPOINT_SUFFIX = ".checkpoint"
# A summary property lives in every metadata JSON that keeps its snapshot: keep it bounded.
MAX_CHECKPOINT_BYTES = 512 * 1024
BACKFILL_INFIX = "--backfill-"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")


class InvalidIngestCommit(ValueError):
    """A malformed ingest commit (the message says how)."""


def check_connector_name(name: str) -> str:
    """Refuse anything but ``[A-Za-z0-9_-]`` (1-100 characters, not starting with ``-``).

    Raises:
        InvalidIngestCommit: A malformed name.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidIngestCommit("a connector name must be 1-128 characters of A-Z a-z 0-9 _ - (not starting with -)")
    return name


def step_property(name: str) -> str:
    return f"{PROPERTY_PREFIX}{name}{STEP_SUFFIX}"


def checkpoint_property(name: str) -> str:
    return f"{PROPERTY_PREFIX}{name}{CHECKPOINT_SUFFIX}"


def encode_positions(positions: Mapping[str, str]) -> str:
    text = json.dumps(dict(sorted(positions.items())), separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_CHECKPOINT_BYTES:
        raise InvalidIngestCommit(
            f"the checkpoint would be larger than {MAX_CHECKPOINT_BYTES} bytes; use fewer partitions "
            "(e.g. a narrower file pattern, or the files connector's retain option)"
        )
    return text


@dataclass(frozen=True)
class IngestCommit:
    """One connector commit: rows up to ``positions``, made from step ``after_step``.

    Attributes:
        name: The connector's name (``check_connector_name``).
        after_step: The step of the checkpoint this commit started from (0: none).
        positions: The new checkpoint (every partition, not only the changed ones).
        source: The source as an OpenLineage dataset: ``(namespace, name)``.
        backfill: True for a backfill's commit (its own checkpoint name; lineage says so).
    """

    name: str
    after_step: int
    positions: Mapping[str, str]
    source: tuple[str, str]
    backfill: bool = False
    stats: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_connector_name(self.name)
        if isinstance(self.after_step, bool) or not isinstance(self.after_step, int) or self.after_step < 0:
            raise InvalidIngestCommit("after_step must be an integer >= 0")
        encode_positions(self.positions)

    @property
    def step(self) -> int:
        return self.after_step + 1

    def snapshot_properties(self) -> dict[str, str]:
        return {step_property(self.name): str(self.step),
                checkpoint_property(self.name): encode_positions(self.positions)}

    def idempotency_key(self, table_uuid: str) -> str:
        """One key per (table, connector, start step). The table's uuid is in it because
        idempotency records outlive a dropped table: a table created again under the same name
        starts at step 0 again and must not be told its first commit was a duplicate."""
        return f"icefloe-ingest:{table_uuid}:{self.name}:{self.after_step}"

    def commit_extra(self) -> dict[str, Any]:
        """The commit record's ``extra``: lineage input dataset, job name, ingest details."""
        connector = self.name.split(BACKFILL_INFIX)[0]  # a backfill's checkpoint name carries the range
        job = f"icefloe.ingest.{connector}" + (".backfill" if self.backfill else "")
        return {"job_name": job,
                "input_datasets": [{"namespace": self.source[0], "name": self.source[1]}],
                "ingest": {"name": self.name, "step": self.step, "backfill": self.backfill, **dict(self.stats)}}


@dataclass(frozen=True)
class StoredCheckpoint:
    """A connector's checkpoint as read back from the target's snapshots."""

    step: int
    positions: dict[str, str]
    snapshot_id: int | None = None


def checkpoint_from_summaries(name: str, summaries: Iterable[tuple[int | None, Mapping[str, str]]]) -> StoredCheckpoint:
    """The checkpoint of connector ``name`` among ``(snapshot id, summary)`` pairs.

    The one with the highest step wins (steps only grow; other writers' snapshots carry none).
    Step 0 with no positions: the connector never committed.

    Raises:
        InvalidIngestCommit: The winning snapshot's checkpoint is not valid JSON (written by
            something else than icefloe): never silently restart from the beginning.
    """
    step_key, checkpoint_key = step_property(name), checkpoint_property(name)
    best: tuple[int, int | None, str] | None = None
    for snapshot_id, summary in summaries:
        raw_step, raw_positions = summary.get(step_key), summary.get(checkpoint_key)
        if raw_step is None or raw_positions is None:
            continue
        try:
            step = int(raw_step)
        except ValueError:
            continue
        if best is None or step > best[0]:
            best = (step, snapshot_id, raw_positions)
    if best is None:
        return StoredCheckpoint(0, {})
    try:
        positions = json.loads(best[2])
    except ValueError:
        positions = None
    readable = isinstance(positions, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in positions.items())
    if not readable:
        raise InvalidIngestCommit(f"the checkpoint of connector {name!r} in snapshot {best[1]} is not readable")
    return StoredCheckpoint(best[0], positions, best[1])


def table_checkpoint(metadata: Any, name: str) -> StoredCheckpoint:
    """The checkpoint of connector ``name`` in a table's metadata (pyiceberg ``TableMetadata``)."""
    pairs = []
    for snapshot in metadata.snapshots:
        summary = getattr(snapshot, "summary", None)
        properties = getattr(summary, "additional_properties", None) or {}
        pairs.append((snapshot.snapshot_id, properties))
    return checkpoint_from_summaries(name, pairs)


def backfill_name(name: str, start: str | None, end: str | None) -> str:
    """The checkpoint name of a backfill of ``name`` over one range: the same range resumes
    (and re-runs) under the same name, so a backfill is idempotent across crashes and repeats."""
    digest = hashlib.sha256(json.dumps([start, end]).encode("utf-8")).hexdigest()[:12]
    return f"{name}{BACKFILL_INFIX}{digest}"


def encode_idle(step: int, tables: Mapping[str, str], positions: Mapping[str, str]) -> bytes:
    """An idle position record (``keys.INGEST_IDLE``): the connector's positions moved past
    checkpoint ``step`` through source data that held nothing for its tables (a stream's
    keepalives, other tables' transactions), so the source may let go of it (a replication slot
    may recycle its WAL) without a commit. ``tables``: target ``ns.t`` -> table uuid, so a
    table dropped and created again (step 0 again) never resumes from it."""
    body = {"step": step, "tables": dict(sorted(tables.items())), "positions": json.loads(encode_positions(positions))}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def idle_positions(raw: bytes | None, step: int, tables: Mapping[str, str]) -> dict[str, str] | None:
    """The positions of idle record ``raw`` if it extends checkpoint ``step`` of exactly these
    ``tables`` (a later commit, or a table created again, makes it stale: None)."""
    if raw is None:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("step") != step or body.get("tables") != dict(sorted(tables.items())):
        return None
    positions = body.get("positions")
    if not isinstance(positions, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in positions.items()):
        return None
    return positions
