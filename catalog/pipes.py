"""Pipe checkpoints: what a pipe's sink commit records, in the same commit as its rows.

A pipe (``icefloe.pipe``) reads a source table's appends after a checkpoint (the last source
commit seq it has processed), transforms them and appends the result to a sink table. For the
hop to be exactly once, the new checkpoint must land atomically with the sink's rows: it is
written into the sink snapshot's summary properties (``icefloe.pipe.<name>.source-seq``), as
Iceberg's Flink and Spark sinks keep their checkpoint ids, and read back from the sink's
snapshots on start. The same commit carries the lineage of the hop (the source as input
dataset, the declared column lineage) in the commit record's ``extra``.

``PipeCommit`` is the one description of that, shared by the in-process API (which hands it
to ``catalog.append.Appender``) and the DoPut header ``x-icefloe-pipe`` (which carries it as
JSON). Everything in it comes from a client, so ``parse`` checks it strictly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog.lru import LockedLRU
from catalog.names import InvalidNameError, check_name, check_namespace

PROPERTY_PREFIX = "icefloe.pipe."
PROPERTY_SUFFIX = ".source-seq"
INGEST_PREFIX = "icefloe.ingest."  # catalog.ingest_checkpoints (which imports nothing from here)
INGEST_STEP_SUFFIX = ".step"
MAX_JSON_BYTES = 8192
MAX_COLUMNS = 256
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_FIELDS = {"name", "source", "source_seq", "after", "columns"}


class InvalidPipeCommit(ValueError):
    """A pipe commit description that is malformed (the message says how)."""


@dataclass(frozen=True)
class PipeCommit:
    """One pipe step's commit: source rows in ``(after, source_seq]`` of ``source``.

    Attributes:
        name: The pipe's checkpoint name (``[A-Za-z0-9._-]``, at most 128 characters).
        source: The source table, ``ns.t``.
        source_seq: The new checkpoint: the last source commit seq this step covers.
        after: The checkpoint the step started from (``source_seq > after >= 0``).
        columns: Column lineage, sink column -> source columns (empty: not declared).
    """

    name: str
    source: str
    source_seq: int
    after: int
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidPipeCommit("pipe name must be 1-128 characters of A-Z a-z 0-9 . _ - (not starting with .)")
        if not isinstance(self.source, str):
            raise InvalidPipeCommit("pipe source must be a table name ns.t")
        parts = self.source.split(".")
        try:
            check_namespace(tuple(parts[:-1]))
            check_name(parts[-1], "table")
        except InvalidNameError as exc:
            raise InvalidPipeCommit(f"pipe source: {exc}") from None
        if len(parts) < 2:
            raise InvalidPipeCommit("pipe source must be a table name ns.t")
        for label, value in (("source_seq", self.source_seq), ("after", self.after)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 1 << 63:
                raise InvalidPipeCommit(f"pipe {label} must be a commit seq (an integer >= 0)")
        if self.source_seq <= self.after:
            raise InvalidPipeCommit(f"pipe source_seq {self.source_seq} must be after its start {self.after}")
        if not isinstance(self.columns, Mapping) or len(self.columns) > MAX_COLUMNS:
            raise InvalidPipeCommit(f"pipe columns must be an object of at most {MAX_COLUMNS} sink columns")
        for target, sources in self.columns.items():
            if not isinstance(target, str) or not target or len(target) > 255:
                raise InvalidPipeCommit("pipe columns: sink column names must be non-empty strings")
            if (isinstance(sources, str) or not isinstance(sources, Iterable)
                    or not all(isinstance(s, str) and s and len(s) <= 255 for s in sources)):
                raise InvalidPipeCommit(f"pipe columns: {target!r} must map to a list of source column names")
        object.__setattr__(self, "columns", {t: tuple(s) for t, s in self.columns.items()})

    @property
    def property_key(self) -> str:
        """The sink snapshot summary property holding this pipe's checkpoint."""
        return checkpoint_property(self.name)

    def snapshot_properties(self) -> dict[str, str]:
        """Summary properties for the sink snapshot."""
        return {self.property_key: str(self.source_seq)}

    def commit_extra(self) -> dict[str, Any]:
        """The commit record's ``extra`` (read by lineage: input, job name, column lineage)."""
        extra: dict[str, Any] = {"inputs": [self.source], "job_name": f"icefloe.pipe.{self.name}",
                                 "pipe": {"name": self.name, "after": self.after, "source_seq": self.source_seq}}
        if self.columns:
            extra["column_lineage"] = {t: [[self.source, s] for s in sources] for t, sources in self.columns.items()}
        return extra

    def idempotency_key(self) -> str:
        """One key per (pipe, start checkpoint): two runs of one pipe that both start from the
        same checkpoint cannot both commit, whatever range each read."""
        return f"icefloe-pipe:{self.name}:{self.after}"

    def to_json(self) -> str:
        body: dict[str, Any] = {"name": self.name, "source": self.source, "source_seq": self.source_seq,
                                "after": self.after}
        if self.columns:
            body["columns"] = {t: list(s) for t, s in self.columns.items()}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> PipeCommit:
        """Parse the JSON a client sent.

        Raises:
            InvalidPipeCommit: Anything but a well-formed description.
        """
        usage = ('a pipe commit is JSON like {"name": "job", "source": "ns.t", "after": 4, "source_seq": 9, '
                 '"columns": {"total": ["v"]}}')
        if len(text) > MAX_JSON_BYTES:
            raise InvalidPipeCommit(f"pipe commit description longer than {MAX_JSON_BYTES} bytes")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError):
            raise InvalidPipeCommit(f"malformed pipe commit: {usage}") from None
        if not isinstance(raw, dict) or not {"name", "source", "source_seq", "after"} <= set(raw):
            raise InvalidPipeCommit(usage)
        unknown = set(raw) - _FIELDS
        if unknown:
            raise InvalidPipeCommit(f"unknown pipe commit field(s) {sorted(unknown)}; {usage}")
        columns = raw.get("columns", {})
        if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
            raise InvalidPipeCommit(f"pipe columns must map sink columns to lists of source columns; {usage}")
        return cls(raw["name"], raw["source"], raw["source_seq"], raw["after"], columns)


def checkpoint_snapshots(snapshots: Iterable[Any]) -> set[int]:
    """The snapshots snapshot expiry must keep: per pipe (and ingest connector), the one holding
    its highest checkpoint.

    A checkpoint lives in a snapshot summary, so expiring that snapshot (past the age window,
    beyond the snapshot cap, or after compaction made it non-current) would lose the pipe's
    place: a restarted pipe could then only fail or start over. Like a tag, or a replication
    slot, the checkpoint keeps its one snapshot (and the files it references) until the pipe
    commits again.
    """
    best: dict[str, tuple[int, int]] = {}  # property -> (checkpoint, snapshot id)
    for snapshot in snapshots:
        for key, value in _checkpoints_in(snapshot):
            if key not in best or value > best[key][0]:
                best[key] = (value, snapshot.snapshot_id)
    return {snapshot_id for _, snapshot_id in best.values()}


# (snapshot id, manifest list) -> its checkpoints. Every commit's snapshot cap looks at every
# retained snapshot, and pyiceberg builds a summary's property dict afresh on each access (a
# few percent of a small append); a snapshot's summary never changes, and its manifest list
# path makes the key unique across tables.
_checkpoints: LockedLRU[tuple[int, str], tuple[tuple[str, int], ...]] = LockedLRU(65536)


def _checkpoints_in(snapshot: Any) -> tuple[tuple[str, int], ...]:
    key = (snapshot.snapshot_id, str(getattr(snapshot, "manifest_list", "")))
    found = _checkpoints.get(key)
    if found is not None:
        return found
    summary = getattr(snapshot, "summary", None)
    properties = getattr(summary, "additional_properties", None) or {}
    checkpoints = []
    for name, raw in properties.items():
        # Ingest connectors (catalog.ingest_checkpoints) keep theirs by the same rule, keyed
        # by their step counter.
        if not ((name.startswith(PROPERTY_PREFIX) and name.endswith(PROPERTY_SUFFIX))
                or (name.startswith(INGEST_PREFIX) and name.endswith(INGEST_STEP_SUFFIX))):
            continue
        try:
            checkpoints.append((name, int(raw)))
        except ValueError:
            continue
    found = tuple(checkpoints)
    if key[1]:  # a snapshot without a manifest list (a test double) is not remembered
        _checkpoints.put(key, found)
    return found


def checkpoint_property(name: str) -> str:
    return f"{PROPERTY_PREFIX}{name}{PROPERTY_SUFFIX}"


def checkpoint_from_summaries(name: str, summaries: Iterable[Mapping[str, str]]) -> int | None:
    """The highest checkpoint of pipe ``name`` among the sink's snapshot summaries (None if none).

    The highest, not the newest: checkpoints only move forward, and another writer's later
    snapshots carry no pipe property at all.
    """
    key = checkpoint_property(name)
    found: int | None = None
    for summary in summaries:
        raw = summary.get(key)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            continue
        found = value if found is None else max(found, value)
    return found
