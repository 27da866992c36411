"""The connector contract: how a source hands data to icefloe's ingestion plane.

A connector reads one external source (a folder of files, a paged HTTP API, a database's
change stream) and hands the rows to the ingest runner in **envelopes**: rows plus the source
position they end at. The runner, not the connector, decides when to commit: it appends the
rows of whole envelopes to the target table and, in the very same catalog commit, the new
**checkpoint** (every partition's last committed position). That is what makes ingestion exactly
once: after a crash, the connector is reopened at the checkpoint that landed with the last
commit, so nothing before it is read again and nothing after it was lost.

The lifecycle, driven by the runner (``icefloe.ingest.runner``)::

    connector = MyConnector(options)          # options checked, no I/O yet
    schema = connector.discover()             # the source's schema as Arrow (may change later)
    connector.open(checkpoint)                # position the reader after ``checkpoint``
    for envelope in connector.read(limit):    # what is available now, in order
        ...                                   # the runner commits rows + checkpoint
    connector.committed(checkpoint)           # tell the source (e.g. confirm a slot)
    connector.health()                        # any time, from any thread
    connector.close()

One envelope shape serves batch, stream and change-data-capture sources: a plain source
emits ``Op.INSERT`` envelopes; a CDC source emits the operation of each run of changes and
names the primary key columns in ``key``, and marks the source transaction each envelope
belongs to so the runner never splits a source transaction across two target commits.

Positions are opaque strings that only the connector interprets (a file's version, an HTTP
cursor, a log sequence number). They must be JSON-safe text; the runner stores them verbatim.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

MAX_POSITION_CHARS = 1024
MAX_PARTITION_CHARS = 1024


class ConnectorError(Exception):
    """Base of every error a connector raises on purpose (the message is for users)."""


class InvalidOptions(ConnectorError, ValueError):
    """The connector's options are malformed or inconsistent (the message says which)."""


class SourceUnavailable(ConnectorError):
    """The source cannot be reached now (down, timing out, refusing); retrying later may work.

    The runner keeps the checkpoint where it is, reports the connector as ``down`` and retries
    with backoff; nothing is committed from a read that raised this.
    """


class SourceDataError(ConnectorError):
    """The source answered, but with data the connector cannot turn into rows (a corrupt file,
    a malformed page). Retrying will not help; the runner stops the connector as ``failed``."""


class Op(enum.StrEnum):
    """What an envelope's rows do to the target."""

    INSERT = "insert"
    UPDATE = "update"  # rows are the new images; ``Envelope.key`` names the key columns
    DELETE = "delete"  # rows carry at least the key columns
    TRUNCATE = "truncate"  # every row of the target goes (no rows); later envelopes apply after it


@dataclass(frozen=True)
class Envelope:
    """Rows read from one partition of a source, and where in the source they end.

    Attributes:
        rows: The rows, as an Arrow table (may have no rows: a position can move without data,
            e.g. an empty file, an empty page, a CDC transaction that touched other tables).
        partition: Which independent part of the source this came from (a file path, a shard,
            ``""`` for a single-stream source). Checkpoints are kept per partition.
        position: The source position right after these rows in ``partition``: opening at a
            checkpoint holding it must resume with what comes next, never these rows again.
        op: What the rows do (``Op.INSERT`` for every non-CDC source).
        key: The primary-key column names (CDC updates and deletes; empty otherwise).
        transaction: The source transaction these rows belong to (None: no transactions).
            Consecutive envelopes with the same transaction are committed together.
        transaction_end: False while more envelopes of ``transaction`` follow; the runner only
            commits after an envelope with ``transaction_end`` true.
        source_time_us: When the source made this data (microseconds since the epoch), if it
            knows: lag is measured from it.
        version: A digest of the rows' source unit at the time it was read (a file's
            size+mtime/etag, a page's content hash), used by backfill to tell an unchanged unit
            from a genuine change. None: the position says it all.
        retired: Partitions this envelope's position now covers, to be dropped from the
            checkpoint (e.g. files folded into a watermark), so that checkpoints stay bounded.
        table: For a connector feeding several tables (``Connector.table_sources``): the target
            table ``ns.t`` these rows go to; the runner commits every table a commit touches in
            ONE catalog commit. None: the connector's one table.
    """

    rows: pa.Table
    partition: str
    position: str
    op: Op = Op.INSERT
    key: tuple[str, ...] = ()
    transaction: str | None = None
    transaction_end: bool = True
    source_time_us: int | None = None
    version: str | None = None
    retired: tuple[str, ...] = ()
    table: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.rows, pa.Table):
            raise TypeError("Envelope.rows must be a pyarrow.Table")
        check_partition(self.partition)
        check_position(self.position)
        if self.op is not Op.INSERT and not self.key:
            raise ValueError(f"a {self.op.value} envelope must name its key columns")


def check_partition(partition: str) -> None:
    if not isinstance(partition, str) or len(partition) > MAX_PARTITION_CHARS:
        raise ValueError(f"a partition must be a string of at most {MAX_PARTITION_CHARS} characters")


def check_position(position: str) -> None:
    if not isinstance(position, str) or not position or len(position) > MAX_POSITION_CHARS:
        raise ValueError(f"a position must be a non-empty string of at most {MAX_POSITION_CHARS} characters")


@dataclass(frozen=True)
class Checkpoint:
    """Every partition's last committed position (empty: start of the source).

    Immutable; ``advanced`` returns a new checkpoint. A partition missing from ``positions`` has
    never had anything committed.
    """

    positions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for partition, position in self.positions.items():
            check_partition(partition)
            check_position(position)
        object.__setattr__(self, "positions", dict(sorted(self.positions.items())))

    def advanced(self, envelope: Envelope) -> Checkpoint:
        """This checkpoint with ``envelope.partition`` moved to ``envelope.position`` (and the
        envelope's ``retired`` partitions gone)."""
        positions = {k: v for k, v in self.positions.items() if k not in envelope.retired}
        positions[envelope.partition] = envelope.position
        return Checkpoint(positions)

    def get(self, partition: str) -> str | None:
        return self.positions.get(partition)

    def __bool__(self) -> bool:
        return bool(self.positions)


class State(enum.StrEnum):
    """A connector's health, as the runner and ``icefloe ingest status`` report it."""

    STARTING = "starting"
    UP = "up"          # the source answers
    DOWN = "down"      # the source does not answer (SourceUnavailable); retried with backoff
    STALLED = "stalled"  # the source answers but its cursor has not advanced for a while
    FAILED = "failed"  # stopped on an error retrying cannot fix (SourceDataError, bad schema)
    PAUSED = "paused"  # stopped by a user


@dataclass(frozen=True)
class Health:
    """A point-in-time health report.

    Attributes:
        state: See ``State``.
        message: Why, for users (the last error; empty when up).
        pending: What the connector knows is waiting at the source and not read yet (files
            not yet ingested, pages known to follow), or None when it cannot tell.
    """

    state: State
    message: str = ""
    pending: int | None = None


class ReportedHealth:
    """A connector's latest ``Health``: set by the thread that reads the source, read by the
    runner's status and metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._health = Health(State.STARTING)

    def get(self) -> Health:
        with self._lock:
            return self._health

    def set(self, health: Health) -> None:
        with self._lock:
            self._health = health


@dataclass(frozen=True)
class BackfillRange:
    """A bounded stretch of a source to read again.

    ``start`` and ``end`` are per-connector position strings (e.g. HTTP cursor values, file
    path globs or mtimes); each connector documents what it accepts. ``start`` None: from the
    beginning; ``end`` None: up to what the live checkpoint has reached.
    """

    start: str | None = None
    end: str | None = None


class Connector(ABC):
    """A source of rows for one target table. Subclass it to add a source.

    A connector instance is used by one runner thread at a time, except ``health`` which may
    be called from any thread. It must not commit anything itself and must not keep its own
    durable state: the checkpoint the runner stores is the only place it resumes from.
    """

    #: The name used in ``icefloe ingest add --source KIND`` and server config ``source = ...``.
    kind: ClassVar[str]
    #: The option names the connector takes; None: it checks its options itself.
    known_options: ClassVar[frozenset[str] | None] = None
    #: True: positions that moved without data (envelopes with no rows) are stored durably
    #: beside the last commit and then passed to ``committed``, so that a source holding data
    #: until it is confirmed (a replication slot keeping WAL) can let go while idle.
    confirms_idle: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any]) -> None:
        """Check the options; do no I/O.

        Args:
            options: The connector's options (strings, numbers, booleans, lists), as given on
                the command line or in the server config.

        Raises:
            InvalidOptions: An option is missing, unknown, or malformed.
        """
        self.options = dict(options)
        if self.known_options is not None:
            unknown = set(self.options) - self.known_options
            if unknown:
                raise InvalidOptions(f"unknown {self.kind} option(s) {sorted(unknown)}; "
                                     f"known: {sorted(self.known_options)}")

    @abstractmethod
    def discover(self) -> pa.Schema:
        """The source's current schema, as Arrow.

        Returns:
            The schema rows will have right now (the source may change it later: envelopes
            carry their own schema, and the target's schema policy decides what a change does).

        Raises:
            SourceUnavailable: The source cannot be reached.
            SourceDataError: The source cannot describe itself (no readable data yet is NOT an
                error: return an empty schema).
        """

    @abstractmethod
    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        """Position the reader right after ``checkpoint``.

        Args:
            checkpoint: The last committed positions (empty: start of the source).
            backfill: Read only this bounded range again (ignoring where the live checkpoint
                is); ``checkpoint`` is then the backfill's own progress.

        Raises:
            SourceUnavailable: The source cannot be reached (the runner retries ``open``).
            InvalidOptions: ``backfill`` is not a range this connector understands.
        """

    @abstractmethod
    def read(self, max_rows: int) -> Iterator[Envelope]:
        """Yield what the source has after the open position, in source order, then stop.

        The iterator ends when the connector has caught up (a later ``read`` continues from
        the last envelope yielded); it should yield roughly ``max_rows`` rows or fewer in total
        before returning, so that the runner can commit. Positions within a partition must
        only move forward.

        Args:
            max_rows: A soft limit on the rows of one call.

        Yields:
            Envelopes, each complete (never half a source unit).

        Raises:
            SourceUnavailable: The source went away mid-read; envelopes already yielded stay
                valid, the runner commits or discards them as a whole.
            SourceDataError: Unreadable data at the current position.
        """

    def committed(self, checkpoint: Checkpoint) -> None:  # noqa: B027 - optional hook
        """Called after ``checkpoint`` landed durably in the target (e.g. to confirm a CDC
        replication slot or delete consumed files). Default: nothing.

        Args:
            checkpoint: The checkpoint of the commit that just landed.
        """

    def wait(self, timeout_s: float, stop: threading.Event) -> None:
        """Block, after a pass that caught up, until the source may have something new, at
        most ``timeout_s`` (and not past ``stop``). Called from the runner's thread between
        passes, possibly while another thread runs a pass: it must not read the source. The
        default waits the whole ``timeout_s`` (polling); a streaming source returns as soon as
        data arrives.
        """
        stop.wait(timeout_s)

    @abstractmethod
    def health(self) -> Health:
        """A cheap, non-blocking report of the connector's state (any thread).

        Returns:
            The connector's current ``Health``.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the source (connections, file handles). Idempotent. Default: nothing."""

    def source_uri(self) -> str:
        """The source as an OpenLineage dataset name (namespace/name joined by '/'), used
        as the input dataset of every commit this connector makes.

        Returns:
            A URI naming the source (no credentials in it).
        """
        return f"{self.kind}://unknown"

    def table_sources(self) -> dict[str, str]:
        """For a connector feeding several tables: target ``ns.t`` -> the ``source_uri`` of
        what feeds it (lineage). Default: none (one table)."""
        return {}
