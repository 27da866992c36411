"""Change scans: the rows appended to one table by the commits with seq in (after, until].

``GetFlightInfo`` on ``FlightDescriptor.for_command(JSON)`` with
``{"changes": "ns.t", "after": S1, "until": S2, "include": "appends"}`` answers endpoints that
stream exactly those rows, as the table's columns plus ``_seq``, ``_snapshot_id`` and
``_operation`` (the ``rows.v1`` columns). The commit log says which commits are in the range;
each append's own metadata file says which data files it added (``feed.rows``), so the answer
is the same for the same range whatever happened since (compaction included), while those
files are kept. The files are dealt into endpoints by bytes (``engine.splits``); a ticket says
only the range and "part k of n", and any server recomputes its files.

Non-append commits of the table in the range are listed in the FlightInfo's ``app_metadata``
(``{"non_appends": [{"seq": N, "operation": "..."}], ...}``) so a client can fail, skip or
re-read. ``"include": "all"`` (overwrites and deletes as ``delete`` / ``insert`` rows) is not
implemented yet and answers UNIMPLEMENTED.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask

from catalog import CursorExpiredError
from catalog.commit_log import CommitRecord
from catalog.names import InvalidNameError, check_name, check_namespace
from flight_server import errors
from flight_server.engine import splits
from flight_server.feed.rows import (
    RowsUnavailable,
    commit_files,
    live_files_by_snapshot,
    load_commit_metadata,
    output_schema,
    with_commit_columns,
)
from flight_server.handles import HandleSigner

logger = logging.getLogger("icefloe.changes")

PURPOSE = "chg"
_APPEND = "append"
MAX_REQUEST_BYTES = 4096


@dataclass(frozen=True)
class ChangeRequest:
    """A validated change-scan request (what a client sends, and what a ticket carries)."""

    namespace: tuple[str, ...]
    table: str
    after: int
    until: int
    include: str = "appends"
    split: tuple[int, int] | None = None

    @property
    def qualified(self) -> str:
        return ".".join((*self.namespace, self.table))

    def body(self) -> bytes:
        raw: dict[str, Any] = {"changes": self.qualified, "after": self.after, "until": self.until,
                               "include": self.include}
        if self.split is not None:
            raw["split"] = list(self.split)
        return json.dumps(raw, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, data: bytes) -> ChangeRequest:
        """Raises errors.InvalidArgument for anything but a well-formed request."""
        usage = ('a change scan is JSON like {"changes": "ns.t", "after": 10, "until": 20, '
                 '"include": "appends"}')
        if len(data) > MAX_REQUEST_BYTES:
            raise errors.InvalidArgument("change scan request too large")
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            raise errors.InvalidArgument(f"malformed change scan: {usage}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("changes"), str):
            raise errors.InvalidArgument(usage)
        unknown = set(raw) - {"changes", "after", "until", "include", "split"}
        if unknown:
            raise errors.InvalidArgument(f"unknown change scan field(s) {sorted(unknown)}; {usage}")
        after, until = raw.get("after"), raw.get("until")
        for name, value in (("after", after), ("until", until)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise errors.InvalidArgument(f"change scan {name!r} must be a commit seq (an integer >= 0)")
        assert isinstance(after, int) and isinstance(until, int)
        if until < after:
            raise errors.InvalidArgument(f"change scan range is empty or reversed: after {after}, until {until}")
        include = raw.get("include", "appends")
        if include not in ("appends", "all"):
            raise errors.InvalidArgument('change scan "include" is "appends" or "all"')
        parts = raw["changes"].split(".")
        try:
            namespace = check_namespace(tuple(parts[:-1]))
            table = check_name(parts[-1], "table")
        except InvalidNameError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        if not namespace:
            raise errors.InvalidArgument('change scan "changes" names a table as ns.t')
        split = None
        if "split" in raw:  # only in tickets this server sealed
            k, n = raw["split"]
            split = (int(k), int(n))
        return cls(namespace, table, after, until, str(include), split)


@dataclass
class _Plan:
    schema: Schema
    appends: list[tuple[CommitRecord, list[DataFile], Any, Any]]  # record, files, metadata, io
    non_appends: list[CommitRecord]


class ChangeScanService:
    """Plans change scans (GetFlightInfo) and streams their endpoints (DoGet)."""

    def __init__(self, catalog: Any, signer: HandleSigner) -> None:
        self.catalog = catalog
        self._signer = signer

    # -- GetFlightInfo ------------------------------------------------------------------

    def flight_info(
        self, descriptor: flight.FlightDescriptor, request: ChangeRequest, target_bytes: int, max_partitions: int,
        locations: list[flight.Location],
    ) -> flight.FlightInfo:
        if request.include != "appends":
            raise errors.Unimplemented('change scans with "include": "all" are not supported yet; use "appends"')
        plan = plan_changes(self.catalog, request)
        files = [f for _, fs, _, _ in plan.appends for f in fs]
        n = splits.partition_count(sum(f.file_size_in_bytes for f in files), len(files), target_bytes, max_partitions)
        tickets = [ChangeRequest(request.namespace, request.table, request.after, request.until, request.include,
                                 (k, n) if n > 1 else None) for k in range(n)]
        endpoints = [flight.FlightEndpoint(self._ticket(t), locations) for t in tickets]
        rows = sum(f.record_count for f in files)
        meta = {"table": request.qualified, "after": request.after, "until": request.until,
                "non_appends": [{"seq": r.seq, "operation": r.operation} for r in plan.non_appends]}
        return flight.FlightInfo(output_schema(plan.schema), descriptor, endpoints, rows, -1, ordered=False,
                                 app_metadata=json.dumps(meta).encode())

    def _ticket(self, request: ChangeRequest) -> bytes:
        # Imported here: the flightsql package imports this module (its dispatcher routes here).
        from flight_server.flightsql import protocol as p

        return p.TicketStatementQuery(self._signer.seal(PURPOSE, request.body())).pack()

    # -- DoGet ---------------------------------------------------------------------------

    def do_get(self, sealed: bytes) -> flight.RecordBatchStream:
        request = ChangeRequest.parse(self._signer.open(PURPOSE, sealed, "change scan ticket"))
        return flight.RecordBatchStream(read_changes(self.catalog, request))


def read_changes(catalog: Any, request: ChangeRequest) -> pa.RecordBatchReader:
    """The rows of a change scan (only part k of n with ``request.split``), streamed.

    Also the in-process API's change scans (``icefloe.open(...).table(t).changes()``).

    Raises:
        errors.InvalidArgument: ``until`` is past the commit head.
        errors.OutOfRange: The range's log records or rows are no longer kept.
        errors.NotFound: The table does not exist.
    """
    plan = plan_changes(catalog, request)
    target = output_schema(plan.schema)
    files = [(record, f, metadata, io) for record, fs, metadata, io in plan.appends for f in fs]
    if request.split is not None:
        k, n = request.split
        dealt = splits.assign([f.file_size_in_bytes for _, f, _, _ in files], n)
        files = [item for item, part in zip(files, dealt, strict=True) if part == k]

    def batches() -> Iterator[pa.RecordBatch]:
        for record, data_file, metadata, io in files:
            scan = ArrowScan(metadata, io, plan.schema, AlwaysTrue())
            try:
                for batch in scan.to_record_batches([FileScanTask(data_file)]):
                    if batch.num_rows:
                        yield with_commit_columns(batch, target, record)
            except FileNotFoundError:
                raise errors.OutOfRange(_expired(request, record.seq)) from None

    return pa.RecordBatchReader.from_batches(target, batches())


def plan_changes(catalog: Any, request: ChangeRequest) -> _Plan:
    """Which commits of the range are appends, and the files each added."""
    head = catalog.log.head()
    if request.until > head:
        raise errors.InvalidArgument(f"change scan until {request.until} is beyond the commit head {head}")
    appends: list[tuple[CommitRecord, list[DataFile], Any, Any]] = []
    non_appends: list[CommitRecord] = []
    try:
        records = [r for r in catalog.log.read(request.after, limit=request.until - request.after)
                   if r.seq <= request.until and r.namespace == request.namespace and r.table == request.table]
    except CursorExpiredError as exc:
        raise errors.OutOfRange(f"cursor expired: log starts at {exc.log_start}") from None
    schema: Schema | None = None
    # Appends whose snapshot was expired find their files among the live ones of the current
    # snapshot: index those once per plan, not once per such append (a range of 1,000 old
    # appends read every manifest 1,000 times).
    live_index: dict[int, dict[int, list[DataFile]]] = {}

    def live_files(metadata: Any, io: Any) -> dict[int, list[DataFile]]:
        current = metadata.current_snapshot()
        key = current.snapshot_id if current is not None else 0
        if key not in live_index:
            live_index[key] = live_files_by_snapshot(metadata, io)
        return live_index[key]

    try:
        for record in records:
            if record.operation != _APPEND or record.snapshot_id is None:
                non_appends.append(record)
                continue
            metadata, io = load_commit_metadata(catalog, record)
            live = functools.partial(live_files, metadata, io)
            written, files = commit_files(metadata, io, record, live)
            appends.append((record, files, metadata, io))
            schema = _latest(schema, written)
    except (FileNotFoundError, RowsUnavailable) as exc:
        logger.info("change scan of %s: %s", request.qualified, exc)
        raise errors.OutOfRange(_expired(request, record.seq)) from None
    if schema is None:
        schema = _current_schema(catalog, request)
    return _Plan(schema, appends, non_appends)


def _current_schema(catalog: Any, request: ChangeRequest) -> Schema:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        schema: Schema = catalog.load_table((*request.namespace, request.table)).schema()
        return schema
    except (NoSuchTableError, NoSuchNamespaceError):
        raise errors.NotFound(f"table {request.qualified} does not exist") from None


def _latest(current: Schema | None, written: Schema) -> Schema:
    """Rows of every append are read with the newest schema among them (by field id: renamed
    and added columns read right; a column dropped later is not in it)."""
    if current is None or written.schema_id >= current.schema_id:
        return written
    return current


def _expired(request: ChangeRequest, seq: int) -> str:
    return (f"cursor expired: the rows of seq {seq} of {request.qualified} are no longer kept "
            f"(expired or compacted away); scan from after={seq}")
