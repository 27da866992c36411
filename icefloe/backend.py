"""The contract both backends implement: in-process (``LocalBackend``) and remote (``RemoteBackend``).

``icefloe.Lake`` / ``Table`` / ``Scan`` are thin and backend-agnostic; everything that differs
between a catalog in this process and a server across the network is behind this ABC, in the
way pyiceberg's ``Catalog`` contract keeps its REST, SQL and Glue catalogs interchangeable.
One behaviour suite (``tests/icefloe/test_behaviour.py``) runs over both implementations, so
a difference between them is a failing test, not a surprise.

Table names are qualified (``ns.t``, multi-level namespaces joined with dots). Every method
raises ``icefloe.Error`` subclasses only.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flight_server.cli.client import CommitEvent

if TYPE_CHECKING:  # catalog.pipes is for pipes only; a thin client that appends does not load it
    from catalog.pipes import PipeCommit


@dataclass(frozen=True)
class AppendEvent(CommitEvent):
    """The commit event of an append, plus what this writer contributed.

    ``rows`` is this append's row count (``added_rows`` counts the whole commit, which may
    group several writers); ``duplicate`` is true when an idempotency key matched an earlier
    append, whose commit this event then describes.
    """

    rows: int = 0
    duplicate: bool = False


class ScanSource(ABC):
    """A planned scan, pinned to one snapshot: every ``open`` streams the same rows."""

    @property
    @abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows."""

    @abstractmethod
    def open(self) -> pa.RecordBatchReader:
        """A new stream of the rows (callable more than once).

        Raises:
            CursorExpired: The pinned snapshot's files are no longer kept.
        """

    def open_exchange(self) -> pa.RecordBatchReader:
        """A new stream of the rows for the Arrow PyCapsule export: the same values as
        ``open``, where string and binary columns may come as their view types
        (``string_view``, ``binary_view``), which polars and DuckDB hold natively.

        Raises:
            CursorExpired: The pinned snapshot's files are no longer kept.
        """
        return self.open()


class Backend(ABC):
    """What a lake can do, in-process or over Flight."""

    def describe(self) -> str:
        """Where the lake is, for reprs (no I/O)."""
        return type(self).__name__

    @abstractmethod
    def create_namespace(self, namespace: str) -> None:
        """Create a namespace (missing parent levels too).

        Args:
            namespace: Dotted levels, e.g. ``"sales"`` or ``"org.sales"``.

        Raises:
            AlreadyExists: It exists.
            InvalidArgument: A level name is refused.
            PermissionDenied: Not allowed (role, or a read-only lake: ``ReadOnly``).
        """

    @abstractmethod
    def create_table(self, name: str, schema: pa.Schema) -> pa.Schema:
        """Create an empty table with ``schema``.

        Returns:
            The table's Arrow schema as stored.

        Raises:
            AlreadyExists: The table exists.
            NotFound: The namespace does not exist.
            InvalidArgument: A bad name or a schema Iceberg cannot store.
            PermissionDenied: Not allowed.
        """

    @abstractmethod
    def table_schema(self, name: str) -> pa.Schema:
        """The current Arrow schema of a table.

        Raises:
            NotFound: The table does not exist.
        """

    @abstractmethod
    def scan(self, name: str, columns: Sequence[str] | None, filter: str | None,
             snapshot_id: int | None) -> ScanSource:
        """Plan a scan of the table's current (or given) snapshot.

        Args:
            name: The table.
            columns: Column names to return, in this order (None: all).
            filter: A SQL boolean expression over the table's columns (DuckDB dialect).
            snapshot_id: Read this snapshot instead of the current one.

        Returns:
            A ``ScanSource`` pinned to the snapshot.

        Raises:
            NotFound: No such table or snapshot.
            InvalidArgument: An unknown column or a bad filter.
        """

    @abstractmethod
    def append(self, name: str, data: pa.RecordBatchReader, idempotency_key: str | None,
               pipe: PipeCommit | None = None, schema_policy: str | None = None) -> AppendEvent:
        """Append a stream to a table in one durable commit.

        Args:
            name: The table (it must exist).
            data: The rows.
            idempotency_key: A retry with the same key and table commits nothing new and
                answers the first commit.
            pipe: A pipe step: its checkpoint goes into the snapshot summary and its lineage
                into the commit, atomically with the rows.
            schema_policy: This append's schema policy (``match``, ``evolve``, ``strict``);
                None: the table's (``icefloe.schema-policy``, default ``match``).

        Returns:
            The event of the commit (``duplicate`` set on a replayed key).

        Raises:
            NotFound: The table does not exist.
            InvalidArgument: The data does not fit the table, or a malformed key.
            Conflict: The commit kept losing races.
            PermissionDenied: Not allowed (``ReadOnly`` beside a running server).
        """

    @abstractmethod
    def subscribe(self, name: str, after: int | str, stop: threading.Event | None) -> Iterator[CommitEvent]:
        """Every commit of the table after ``after``, live, each exactly once and in order.

        Args:
            name: The table.
            after: A commit seq, ``"earliest"`` or ``"latest"``.
            stop: Ends the iteration promptly once set.

        Raises:
            CursorExpired: ``after`` is older than the retained commit log.
            NotFound: The table does not exist (remote: when the server says so).
        """

    @abstractmethod
    def changes(self, name: str, after: int, until: int) -> pa.RecordBatchReader:
        """The rows appended to the table by commits with seq in ``(after, until]``.

        Returns:
            The table's columns plus ``_seq``, ``_snapshot_id``, ``_operation``.

        Raises:
            InvalidArgument: ``until`` is past the head, or the range is reversed.
            CursorExpired: The range's log records or rows are no longer kept.
            NotFound: The table does not exist.
        """

    @abstractmethod
    def head(self) -> int:
        """The seq of the latest commit in the lake (0 before the first)."""

    @abstractmethod
    def snapshot_summaries(self, name: str) -> list[Mapping[str, str]]:
        """The summary properties of the table's retained snapshots (pipe checkpoints).

        Raises:
            NotFound: The table does not exist.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the catalog or connection."""


def append_event(name: str, result: Mapping[str, Any], event: CommitEvent | None) -> AppendEvent:
    """The ``AppendEvent`` of an append's result JSON and its commit's event (None: no commit,
    the append held no rows)."""
    rows, duplicate = int(result["rows"]), bool(result.get("duplicate"))
    if event is None:
        namespace, _, table = name.rpartition(".")
        return AppendEvent(
            seq=int(result["commit_seq"]), committed_at=datetime.now(UTC), namespace=namespace, table=table,
            table_uuid=None, operation="none", snapshot_id=result.get("snapshot_id"), parent_snapshot_id=None,
            added_rows=0, deleted_rows=0, added_files=0, metadata_location=None, principal=None,
            rows=rows, duplicate=duplicate,
        )
    return AppendEvent(**asdict(event), rows=rows, duplicate=duplicate)
