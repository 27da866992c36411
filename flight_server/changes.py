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
(``{"non_appends": [{"seq": N, "operation": "...", "data_change": bool}], ...}``) so a client
can fail, skip or re-read. ``data_change`` is false for commits that leave the rows as they
were: compaction (an Iceberg ``replace`` snapshot), snapshot expiry, schema changes; a client
following appends can skip those.

With ``"include": "all"``, overwrites and deletes are rows too (Iceberg's changelog view, the
Delta CDF equivalent): each such commit answers the rows it removed as
``_operation`` ``delete`` and the rows it added as ``insert``, carry-overs cancelled
(``changelog``): a copy-on-write commit from the files it removed and added, a merge-on-read
commit (delete files: position, equality, deletion vectors) from the table as read before and
after it (``feed.row_changes``). Those commits are then not listed in ``non_appends``. A commit
that replaced the whole table stays listed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
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
from catalog.sandbox import confine
from flight_server import errors
from flight_server.appended_files import local_path, shared_reader
from flight_server.changelog import net_changes
from flight_server.engine import splits
from flight_server.feed.commit_columns import with_commit_columns
from flight_server.feed.row_changes import commit_row_changes, snapshot_has_deletes
from flight_server.feed.rows import (
    RowsUnavailable,
    commit_changes,
    commit_files,
    live_commit_files,
    live_files_by_snapshot,
    load_commit_metadata,
    output_schema,
    snapshot_operation,
)
from flight_server.message_size import bounded_stream
from flight_server.security.handles import HandleSigner

logger = logging.getLogger("icefloe.changes")

PURPOSE = "chg"
_APPEND = "append"
_APPEND_CACHE_SIZE = 10_000  # commits (each a few DataFile records)
# Commits that leave every row as it was (no snapshot, or not a data change).
_NO_DATA_CHANGE = frozenset({"schema", "expire", "properties"})
# Commits whose snapshot a changelog can express as delete / insert rows.
_ROW_CHANGES = frozenset({"overwrite", "delete"})
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


@dataclass(frozen=True)
class _Unit:
    """One piece of work for an endpoint: one appended file, or one commit's changelog."""

    record: CommitRecord
    metadata: Any
    io: Any
    added: list[DataFile]
    removed: list[DataFile] = field(default_factory=list)
    changelog: bool = False
    # The commit wrote delete files (merge-on-read): its rows come from feed.row_changes.
    row_level: bool = False

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in (*self.added, *self.removed))

    @property
    def rows(self) -> int:
        return sum(f.record_count for f in (*self.added, *self.removed))


@dataclass
class _Plan:
    schema: Schema
    units: list[_Unit]
    non_appends: list[tuple[CommitRecord, bool]]  # record, data_change


class ChangeScanService:
    """Plans change scans (GetFlightInfo) and streams their endpoints (DoGet)."""

    def __init__(self, catalog: Any, signer: HandleSigner | None) -> None:
        self.catalog = catalog
        self._signer = signer
        # (table uuid, seq) -> what that append wrote (see _appended); shared by every scan.
        self._appends: OrderedDict[tuple[str | None, int], tuple[Schema, list[DataFile], Any, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._appended_files = shared_reader()

    # -- GetFlightInfo ------------------------------------------------------------------

    def flight_info(
        self, descriptor: flight.FlightDescriptor, request: ChangeRequest, target_bytes: int, max_partitions: int,
        locations: list[flight.Location],
    ) -> flight.FlightInfo:
        plan = self._plan(request)
        # Planning reads metadata only; a file that compaction replaced and snapshot expiry
        # then deleted would fail the DoGet midway. Say so now (one stat per file).
        for unit in plan.units:
            for data_file in (*unit.added, *unit.removed):
                if not unit.io.new_input(data_file.file_path).exists():
                    raise errors.OutOfRange(_expired(request, unit.record.seq))
        n = splits.partition_count(sum(u.bytes for u in plan.units), len(plan.units), target_bytes, max_partitions)
        tickets = [ChangeRequest(request.namespace, request.table, request.after, request.until, request.include,
                                 (k, n) if n > 1 else None) for k in range(n)]
        endpoints = [flight.FlightEndpoint(self._ticket(t), locations) for t in tickets]
        # Exact for appends; for changelog commits an upper bound (carry-overs cancel out).
        rows = sum(u.rows for u in plan.units)
        meta = {"table": request.qualified, "after": request.after, "until": request.until,
                "non_appends": [{"seq": r.seq, "operation": r.operation, "data_change": change}
                                for r, change in plan.non_appends]}
        return flight.FlightInfo(output_schema(plan.schema), descriptor, endpoints,
                                 rows if request.include == "appends" else -1, -1, ordered=False,
                                 app_metadata=json.dumps(meta).encode())

    def _ticket(self, request: ChangeRequest) -> bytes:
        # Imported here: the flightsql package imports this module (its dispatcher routes here).
        from flight_server.flightsql import protocol as p

        assert self._signer is not None, "a service that issues tickets has a signer"
        return p.TicketStatementQuery(self._signer.seal(PURPOSE, request.body())).pack()

    # -- DoGet ---------------------------------------------------------------------------

    def do_get(self, sealed: bytes) -> flight.RecordBatchStream:
        assert self._signer is not None, "a service that reads tickets has a signer"
        request = ChangeRequest.parse(self._signer.open(PURPOSE, sealed, "change scan ticket"))
        return bounded_stream(self.read(request))

    def read(self, request: ChangeRequest) -> pa.RecordBatchReader:
        """The rows of a change scan (only part k of n with ``request.split``), streamed.

        Raises:
            errors.InvalidArgument: ``until`` is past the commit head.
            errors.OutOfRange: The range's log records or rows are no longer kept.
            errors.NotFound: The table does not exist.
        """
        plan = self._plan(request)
        target = output_schema(plan.schema)
        units = plan.units
        if request.split is not None:
            k, n = request.split
            dealt = splits.assign([u.bytes for u in units], n)
            units = [unit for unit, part in zip(units, dealt, strict=True) if part == k]

        # One reader setup per commit metadata (building one reads configuration); the
        # metadata objects live as long as the plan, so their ids stay unique meanwhile.
        scans: dict[int, ArrowScan] = {}

        def scan_of(unit: _Unit) -> ArrowScan:
            found = scans.get(id(unit.metadata))
            if found is None:
                found = scans[id(unit.metadata)] = ArrowScan(unit.metadata, unit.io, plan.schema, AlwaysTrue())
            return found

        def slow(run: list[_Unit]) -> Iterator[pa.RecordBatch]:
            for unit, read in zip(
                run, _prefetched(run, lambda u: self._unit_batches(u, scan_of(u), target, plan.schema)), strict=True
            ):
                try:
                    yield from read()
                except FileNotFoundError:
                    raise errors.OutOfRange(_expired(request, unit.record.seq)) from None

        def fast(run: list[_Unit]) -> Iterator[pa.RecordBatch]:
            files = [(unit.record, f) for unit in run for f in unit.added]
            try:
                yield from self._appended_files.batches(files, plan.schema, target)
            except FileNotFoundError:
                gone = next((r for r, f in files if not _exists(f)), files[0][0])
                raise errors.OutOfRange(_expired(request, gone.seq)) from None

        def readable(unit: _Unit) -> bool:
            return not unit.changelog and self._appended_files.readable(plan.schema, unit.added)

        def batches() -> Iterator[pa.RecordBatch]:
            for is_fast, run in _runs(units, readable):
                yield from (fast if is_fast else slow)(run)

        return pa.RecordBatchReader.from_batches(target, batches())

    @staticmethod
    def _unit_batches(unit: _Unit, scan: ArrowScan, target: pa.Schema, schema: Schema) -> Iterator[pa.RecordBatch]:
        if unit.row_level:
            assert unit.record.snapshot_id is not None
            deleted, inserted = net_changes(*commit_row_changes(
                unit.metadata, unit.io, unit.record.parent_snapshot_id, unit.record.snapshot_id, schema))
            for rows, operation in ((deleted, "delete"), (inserted, "insert")):
                for batch in rows.to_batches():
                    if batch.num_rows:
                        yield with_commit_columns(batch, target, unit.record, operation)
            return
        if not unit.changelog:
            for batch in scan.to_record_batches([FileScanTask(f) for f in unit.added]):
                if batch.num_rows:
                    yield with_commit_columns(batch, target, unit.record)
            return
        deleted, inserted = net_changes(
            scan.to_table([FileScanTask(f) for f in unit.removed]), scan.to_table([FileScanTask(f) for f in unit.added])
        )
        for rows, operation in ((deleted, "delete"), (inserted, "insert")):
            for batch in rows.to_batches():
                if batch.num_rows:
                    yield with_commit_columns(batch, target, unit.record, operation)

    # -- planning ------------------------------------------------------------------------

    def _plan(self, request: ChangeRequest) -> _Plan:
        head = self.catalog.log.head()
        if request.until > head:
            raise errors.InvalidArgument(f"change scan until {request.until} is beyond the commit head {head}")
        units: list[_Unit] = []
        non_appends: list[tuple[CommitRecord, bool]] = []
        try:
            records = [r for r in self.catalog.log.read(request.after, limit=request.until - request.after)
                       if r.seq <= request.until and r.namespace == request.namespace and r.table == request.table]
        except CursorExpiredError as exc:
            raise errors.OutOfRange(f"cursor expired: log starts at {exc.log_start}") from None
        schema: Schema | None = None
        # The table must exist now, as for a SELECT: the commit log and the metadata files of a
        # dropped table outlive it, and would otherwise still answer its rows. Checked at
        # GetFlightInfo and again at DoGet (both plan), so a table dropped in between is gone.
        current = _Current(self.catalog, request)
        if current.table is None:
            raise errors.NotFound(f"table {request.qualified} does not exist")
        try:
            for record in records:
                if record.snapshot_id is None or record.operation in _NO_DATA_CHANGE:
                    non_appends.append((record, record.snapshot_id is None and record.operation not in _NO_DATA_CHANGE))
                    continue
                if record.operation == _APPEND:
                    written, files, metadata, io = self._appended(record, current)
                    units.extend(_Unit(record, metadata, io, [f]) for f in files)
                    schema = _latest(schema, written)
                    continue
                metadata, io = load_commit_metadata(self.catalog, record)
                kind = snapshot_operation(metadata, record)
                if request.include == "all" and kind in _ROW_CHANGES and record.operation in _ROW_CHANGES:
                    change = commit_changes(metadata, io, record)
                    # A copy-on-write commit over files that had deletes: their removed rows are
                    # the visible ones, read with those deletes (feed.row_changes) like a MOR commit.
                    if change is not None and snapshot_has_deletes(metadata, record.parent_snapshot_id):
                        change = None
                    if change is not None:
                        written, added, removed = change
                        units.append(_Unit(record, metadata, io, added, removed, changelog=True))
                        schema = _latest(schema, written)
                        continue
                    # Delete files (merge-on-read): rows from the snapshots before and after.
                    snapshot = metadata.snapshot_by_id(record.snapshot_id)
                    if snapshot is None:
                        raise RowsUnavailable("the commit's snapshot was expired")
                    own = metadata.schema_by_id(snapshot.schema_id) if snapshot.schema_id is not None else None
                    units.append(_Unit(record, metadata, io, [], [], changelog=True, row_level=True))
                    schema = _latest(schema, own or metadata.schema())
                    continue
                data_change = kind != "replace" and not record.extra.get("maintenance")
                non_appends.append((record, data_change))
        except (FileNotFoundError, RowsUnavailable) as exc:
            logger.info("change scan of %s: %s", request.qualified, exc)
            raise errors.OutOfRange(_expired(request, record.seq)) from None
        for unit in units:  # nothing outside the table's folder is read (catalog.sandbox)
            for data_file in (*unit.added, *unit.removed):
                confine(unit.io, data_file.file_path)
        if schema is None:
            schema = current.table.schema()
        return _Plan(schema, units, non_appends)

    def _appended(self, record: CommitRecord, current: _Current | None) -> tuple[Schema, list[DataFile], Any, Any]:
        """The schema and files an append wrote, with the metadata and io to read them.

        What a commit added never changes, so the answer is cached by commit. The current
        snapshot's live-file index answers every commit whose files are all still live in one
        pass over its manifests; the others (compacted since) read their own snapshot's.
        """
        key = (record.table_uuid, record.seq)
        cached = self._appends.get(key)
        if cached is not None:
            return cached
        found = None
        if current is not None and current.table is not None and str(current.table.metadata.table_uuid) == (
            record.table_uuid
        ):
            answer = live_commit_files(current.table.metadata, record, current.live())
            if answer is not None:
                found = (*answer, current.table.metadata, current.table.io)
        if found is None:
            metadata, io = load_commit_metadata(self.catalog, record)
            live = functools.partial(live_files_by_snapshot, metadata, io)
            found = (*commit_files(metadata, io, record, live), metadata, io)
        with self._lock:
            self._appends[key] = found
            while len(self._appends) > _APPEND_CACHE_SIZE:
                self._appends.popitem(last=False)
        return found


def _runs(units: list[_Unit], fast: Callable[[_Unit], bool]) -> Iterator[tuple[bool, list[_Unit]]]:
    """``units`` in order as maximal runs of consecutive units that ``fast`` says alike."""
    run: list[_Unit] = []
    kind = False
    for unit in units:
        this = fast(unit)
        if run and this != kind:
            yield kind, run
            run = []
        run.append(unit)
        kind = this
    if run:
        yield kind, run


def _exists(data_file: DataFile) -> bool:
    path = local_path(data_file.file_path)
    return path is not None and os.path.exists(path)


_PREFETCH_UNITS = 8
_PREFETCH_MAX_BYTES = 16 * 1024 * 1024
_prefetch_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="icefloe-changes")


def _prefetched(units: list[_Unit], read: Callable[[_Unit], Iterator[pa.RecordBatch]]
                ) -> Iterator[Callable[[], Iterator[pa.RecordBatch]]]:
    """For each unit in order, a function giving its batches. Small units (the many tiny
    files of small appends) are read up to ``_PREFETCH_UNITS`` ahead on a pool, so their file
    opens overlap instead of queueing one after another; large ones stream when their turn
    comes, never held in memory whole."""
    ahead: deque[tuple[_Unit, Future[list[pa.RecordBatch]] | None]] = deque()
    position = 0

    def fill() -> None:
        nonlocal position
        while position < len(units) and len(ahead) < _PREFETCH_UNITS:
            unit = units[position]
            position += 1
            small = unit.bytes <= _PREFETCH_MAX_BYTES
            ahead.append((unit, _prefetch_pool.submit(_read_all, read, unit) if small else None))

    fill()
    while ahead:
        unit, future = ahead.popleft()
        fill()
        if future is None:
            yield functools.partial(read, unit)
        else:
            yield functools.partial(_result, future)


def _read_all(read: Callable[[_Unit], Iterator[pa.RecordBatch]], unit: _Unit) -> list[pa.RecordBatch]:
    return list(read(unit))


def _result(future: Future[list[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    return iter(future.result())


_in_process: weakref.WeakKeyDictionary[Any, ChangeScanService] = weakref.WeakKeyDictionary()
_in_process_lock = threading.Lock()


def read_changes(catalog: Any, request: ChangeRequest) -> pa.RecordBatchReader:
    """A change scan of ``catalog`` read in this process (the ``icefloe`` API's in-process
    ``Table.changes``): the same plan and rows as the Flight endpoints, no tickets.

    Raises:
        errors.InvalidArgument: ``until`` is past the commit head.
        errors.OutOfRange: The range's log records or rows are no longer kept.
        errors.NotFound: The table does not exist.
    """
    with _in_process_lock:
        service = _in_process.get(catalog)
        if service is None:
            service = _in_process[catalog] = ChangeScanService(catalog, None)
    return service.read(request)


class _Current:
    """The table as it is now and its live-file index, loaded once per plan when first needed."""

    def __init__(self, catalog: Any, request: ChangeRequest) -> None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            self.table: Any = catalog.load_table((*request.namespace, request.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            self.table = None
        self._live: dict[int, list[DataFile]] | None = None

    def live(self) -> dict[int, list[DataFile]]:
        if self._live is None:
            self._live = live_files_by_snapshot(self.table.metadata, self.table.io)
        return self._live


def _latest(current: Schema | None, written: Schema) -> Schema:
    """Rows of every append are read with the newest schema among them (by field id: renamed
    and added columns read right; a column dropped later is not in it)."""
    if current is None or written.schema_id >= current.schema_id:
        return written
    return current


def _expired(request: ChangeRequest, seq: int) -> str:
    return (f"cursor expired: the rows of seq {seq} of {request.qualified} are no longer kept "
            f"(compacted, then their snapshots expired; a table keeps them as long as its snapshot "
            f"retention, history.expire.max-snapshot-age-ms / icefloe.snapshots.retain); scan from after={seq}")
