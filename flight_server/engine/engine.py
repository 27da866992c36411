"""The SQL engine: DuckDB, sandboxed, reading Iceberg tables through the catalog at pinned snapshots.

Interface (all the Flight SQL layer uses):
- ``classify(sql)``: is it one read-only query, or something else;
- ``pin(sql, default_schema)``: the catalog tables the SQL names, with the snapshot ids to read;
- ``describe(...)``: result and parameter Arrow schemas without running the query;
- ``execute(...)``: a ``pyarrow.RecordBatchReader`` streaming the result straight out of DuckDB
  (no Python code runs per batch).

Isolation: every running query owns a "slot", one sandboxed in-memory DuckDB database
(catalog ``icefloe``), from setup until its reader is dropped. Its Iceberg sources are
registered on the query's cursor and named by views ``icefloe."<namespace>"."<table>"``
that exist only for that query, so concurrent queries at different snapshots of the same
table never see each other's views. The pool size is the cap on concurrent queries.

Sandbox, three walls: (1) DuckDB settings, then ``lock_configuration``: no external access
(no file reads, writes, globbing, ATTACH of files, extension installs), no extension
autoloading, no Python replacement scans; (2) ``policy``: only single queries run, checked on
DuckDB's parse tree (allowed table functions, no server-revealing functions, table references
that are icefloe tables or CTEs), at planning and again at execution, whatever a ticket says;
(3) ``slots``: a slot that is not pristine after a query is discarded. DuckDB spills to a
private folder (``slots.SpillFolder``). Verified with DuckDB 2.0.1: ``allowed_directories``
would still let ``COPY ... TO`` write inside the allowed folder, which is why the sandbox
allows no directory at all and table data reaches it only as Arrow streams.

Bounded work: statements are capped in size; planning (parsing, ``AT`` evaluation) runs on a
cursor the watchdog interrupts at the query's deadline, like the query itself.

Scan paths (all produce the schema the sandbox binder gives, so GetFlightInfo and DoGet
agree): plain ``SELECT cols FROM t`` and selective single-table queries read the pinned
local files with DuckDB's native Parquet reader in a separate internal database that runs
only SQL icefloe writes (never client text); everything else scans Arrow datasets inside
the sandbox, where DuckDB pushes projections and filters into the dataset scan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import queue
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Generator, Iterator
from typing import Any

import duckdb
import pyarrow as pa
from duckdb import _seam  # binder access: schema of a statement without running it
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from flight_server import errors
from flight_server.engine import history, messages, policy, splits, view_expansion
from flight_server.engine.bound import Bound, BoundSchemas
from flight_server.engine.iceberg_source import IcebergSources, SourcePart, quote
from flight_server.engine.origins import ColumnOrigin, Source, result_origins
from flight_server.engine.pushdown import row_filter
from flight_server.engine.runs import QueryRuns
from flight_server.engine.scans import BATCH_ROWS, ScanPaths, arrow_schema
from flight_server.engine.slots import CATALOG_NAME, Slot, SlotPool, SpillFolder
from flight_server.engine.tables import PinnedTable, name_candidates, table_hint
from flight_server.engine.watchdog import Running, Watchdog
from flight_server.transactions import staged_table

logger = logging.getLogger("icefloe.engine")

# How long a ticket's snapshots are kept from expiry after GetFlightInfo (see catalog.pins).
TICKET_PIN_S = 900.0
_READ_TYPES = {"SELECT", "EXPLAIN"}
# MULTI: one statement DuckDB expands into several (ALTER TABLE ... ADD COLUMN ... NOT NULL).
_WRITE_TYPES = {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "MERGE_INTO", "COPY", "MULTI"}
# The longest SQL statement accepted (the text; parameters are bound separately).
MAX_STATEMENT_BYTES = 1024 * 1024
# Queries that passed the policy recently (by hash of their SQL and pins): a DoGet right after
# its GetFlightInfo does not parse the same text again.
_CHECKED_CACHE = 4096
# Parse trees of recently planned statements up to this long (trees are ~20x their text).
_TREE_CACHE = 512
_TREE_CACHE_MAX_CHARS = 8192


class Kind:
    QUERY = "query"
    WRITE = "write"


class Engine:
    def __init__(
        self,
        catalog: Any,
        query_timeout_s: float = 300.0,
        max_concurrent: int = 16,
        threads: int | None = None,
        stopping: threading.Event | None = None,
        memory_limit: str | None = None,
        spill_parent: str | None = None,
    ) -> None:
        self.catalog = catalog
        # Set when the server begins to shut down: running queries are interrupted so their
        # streams end and gRPC can drain.
        self._server_stopping = stopping or threading.Event()
        self.query_timeout_s = query_timeout_s
        self.sources = IcebergSources()
        self.bound = BoundSchemas(catalog)
        self._threads = threads
        self._memory_limit = memory_limit
        self.spill = SpillFolder(spill_parent)
        messages.register_private_path(str(self.spill.path))
        warehouse = getattr(catalog, "warehouse_path", None) or getattr(catalog, "properties", {}).get("warehouse")
        if isinstance(warehouse, str):
            messages.register_private_path(warehouse.removeprefix("file://"))
        self._parser = Slot(threads)  # parsing, policy checks, AT values; never sees a table
        self._parser_cursors: queue.LifoQueue[duckdb.DuckDBPyConnection] = queue.LifoQueue()
        # Policy-checked queries (by _check_key) and where their result columns come from.
        self._checked: OrderedDict[bytes, list[ColumnOrigin | None]] = OrderedDict()
        self._trees: OrderedDict[tuple[str, str], policy.QueryTree] = OrderedDict()
        self._checked_lock = threading.Lock()
        # Native Parquet reads for plain and selective scans (SQL icefloe writes, never the client's).
        self.scans = ScanPaths(catalog, self.spill.new_folder())
        # Each running query owns a slot, so the views naming its pinned snapshots cannot clash
        # with another query's; the pool size is the cap on concurrent queries.
        self.slots = SlotPool(max_concurrent, self._new_slot)
        self.watchdog = Watchdog(self._server_stopping)
        self.runs = QueryRuns(self.slots, self.watchdog)

    def close(self) -> None:
        self.watchdog.close()
        self.spill.remove()

    def _new_slot(self) -> Slot:
        return Slot(self._threads, self.spill.new_folder(), self._memory_limit)

    # -- statements ---------------------------------------------------------------------

    def classify(self, sql: str) -> str:
        return Kind.QUERY if self._statement_type(sql) in _READ_TYPES else Kind.WRITE

    def _statement_type(self, sql: str) -> str:
        """The DuckDB statement type of ``sql``, which must be exactly one read or write statement."""
        if len(sql.encode("utf-8")) > MAX_STATEMENT_BYTES:
            raise errors.InvalidArgument(f"SQL statement too long (at most {MAX_STATEMENT_BYTES // 1024} KiB)")
        with self._parser_cursor() as cur:
            try:
                statements = cur.extract_statements(sql)
                if len(statements) != 1:
                    raise errors.InvalidArgument(f"expected exactly one SQL statement, got {len(statements)}")
                kind = statements[0].type.name
            except duckdb.Error as exc:
                raise messages.map_duckdb(exc) from None
            except ValueError:
                # A statement type the Python binding has no name for (UPDATE EXTENSIONS, ...).
                raise errors.InvalidArgument("this kind of statement is not allowed in icefloe SQL") from None
        if kind in _READ_TYPES or kind in _WRITE_TYPES:
            return str(kind)
        raise errors.InvalidArgument(f"{kind} statements are not allowed")

    @contextlib.contextmanager
    def _parser_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the parser database, from a small pool: making one costs ~0.2 ms, more
        than splitting or parsing a statement. Parser cursors only split, parse and evaluate
        constants (no state outlives a call; an interrupt does not outlive its statement)."""
        try:
            cur = self._parser_cursors.get_nowait()
        except queue.Empty:
            cur = self._parser.cursor()
        try:
            yield cur
        finally:
            self._parser_cursors.put(cur)

    @contextlib.contextmanager
    def _planning(self, context: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        """A parser cursor under the watchdog: planning is bounded by the query timeout and
        stops when the client cancels, like execution."""
        with self._parser_cursor() as cur:
            run = Running(self._parser, cur, context, time.monotonic() + self.query_timeout_s)
            run.pooled = False
            self.watchdog.add(run)
            try:
                yield cur
            except duckdb.Error as exc:
                raise self._failure(run, exc) from None
            finally:
                self.runs.release(run)
        if run.interrupted:
            raise self._failure(run, duckdb.InterruptException("interrupted"))

    def check(self, sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable],
              cur: duckdb.DuckDBPyConnection | None = None) -> policy.QueryTree | None:
        """Refuse ``sql`` unless it is one query inside the sandbox policy whose every table
        reference is one of ``pins`` (or a CTE). Returns its tree (None: passed moments ago)."""
        key = _check_key(sql, default_schema, pins)
        with self._checked_lock:
            if key in self._checked:
                self._checked.move_to_end(key)
                return None
        kind = self._statement_type(sql)
        if kind not in _READ_TYPES:
            raise errors.InvalidArgument("this statement writes; send it as an update")
        if cur is None:
            with self._planning(None) as planning:
                tree = policy.check_query(planning, sql, explain=kind == "EXPLAIN")
        else:
            tree = policy.check_query(cur, sql, explain=kind == "EXPLAIN")
        known = {(p.namespace, p.view_name.lower()) for p in pins}
        for ref in tree.tables:
            if ref.at_unit is not None:
                raise errors.InvalidArgument("AT clauses are planned before a query runs")
            if not any((ns, name.lower()) in known for ns, name in name_candidates(ref.parts, default_schema)):
                raise self._missing_table(ref.parts, default_schema)
        self._remember(key, self._origins(tree, pins, default_schema))
        return tree

    def _remember(self, key: bytes, origins: list[ColumnOrigin | None]) -> None:
        with self._checked_lock:
            self._checked[key] = origins
            while len(self._checked) > _CHECKED_CACHE:
                self._checked.popitem(last=False)

    def column_origins(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> list[ColumnOrigin | None]:
        """The table column behind each result column of a planned query (None where a column
        is computed; an empty list when the query's columns cannot be traced).

        Remembered with the policy check, so a DoGet right after its GetFlightInfo finds them.
        """
        key = _check_key(sql, default_schema, pins)
        with self._checked_lock:
            found = self._checked.get(key)
        if found is None:
            self.check(sql, default_schema, pins)
            with self._checked_lock:
                found = self._checked.get(key, [])
        return found

    def _origins(
        self, tree: policy.QueryTree, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> list[ColumnOrigin | None]:
        if tree.statement is None:
            return []
        by_view = {(p.namespace, p.view_name.lower()): p for p in pins}

        def source(parts: tuple[str, ...], alias: str) -> Source | None:
            for ns, name in name_candidates(parts, default_schema):
                pin = by_view.get((ns, name.lower()))
                if pin is None or pin.kind != "data":
                    continue
                try:
                    table = self.catalog.load_table((*pin.namespace, pin.name))
                except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                    return None
                schema = table.schemas().get(pin.schema_id) or table.schema()
                return Source(alias, pin.namespace, pin.name, list(schema.fields), read_only=pin.view is not None)
            return None

        return result_origins(tree.statement, source)

    def plan(self, sql: str, default_schema: tuple[str, ...] | None,
             context: Any = None) -> tuple[str, list[PinnedTable]]:
        """A query ready to run: ``sql`` with time-travel references rewritten, and its pins.

        Raises:
            errors.InvalidArgument: Not one query, a bad ``AT`` clause, or too long.
            errors.PermissionDenied: Outside the sandbox policy.
            errors.NotFound: A table it names does not exist.
            errors.DeadlineExceeded: Planning took longer than the query timeout.
        """
        sql = view_expansion.expand(self.catalog, sql, default_schema)  # Iceberg views: their SQL, inline
        kind = self._statement_type(sql)
        if kind not in _READ_TYPES:
            raise errors.InvalidArgument("this statement writes; send it as an update")
        tree = self._checked_tree(sql, kind, context)
        refs: list[history.AtReference] = []
        if any(ref.at_unit is not None for ref in tree.tables):
            with self._planning(context) as cur:  # AT values are evaluated at each planning
                refs = history.resolve_at_references(cur, self.catalog, tree.tables, default_schema)
        rewritten = history.rewrite(sql, refs, quote, CATALOG_NAME) if refs else sql
        pins = {(r.namespace, history.at_view_name(r.name, r.snapshot_id)):
                PinnedTable(r.namespace, r.name, r.snapshot_id, r.schema_id,
                            view=history.at_view_name(r.name, r.snapshot_id)) for r in refs}
        for ref in tree.tables:
            if ref.at_unit is not None:
                continue
            for ns, table in name_candidates(ref.parts, default_schema):
                if (ns, table) in pins:
                    break
                pin = self._pin_one(ns, table)
                if pin is not None:
                    pins[(ns, table)] = pin
                    break
            else:
                raise self._missing_table(ref.parts, default_schema)
        registry = getattr(self.catalog, "pins", None)
        if registry is not None:
            # The ticket's DoGet must still find these snapshots, whatever commits meanwhile.
            for pin in pins.values():
                if pin.snapshot_id is not None:
                    registry.pin(pin.namespace, pin.name, pin.snapshot_id, TICKET_PIN_S)
        planned = list(pins.values())
        if refs:
            # The rewritten text must pass the same policy with exactly these pins: it is what a
            # ticket will carry and DoGet will run.
            self.check(rewritten, default_schema, planned)
        else:  # just checked, as is
            self._remember(_check_key(rewritten, default_schema, planned), self._origins(tree, planned, default_schema))
        return rewritten, planned

    def _checked_tree(self, sql: str, kind: str, context: Any) -> policy.QueryTree:
        """The policy-checked parse tree of a query; short statements' trees are remembered
        (dashboards and drivers send the same text again and again)."""
        key = (sql, kind)
        with self._checked_lock:
            tree = self._trees.get(key)
            if tree is not None:
                self._trees.move_to_end(key)
                return tree
        with self._planning(context) as cur:
            tree = policy.check_query(cur, sql, explain=kind == "EXPLAIN")
        if len(sql) <= _TREE_CACHE_MAX_CHARS:
            with self._checked_lock:
                self._trees[key] = tree
                while len(self._trees) > _TREE_CACHE:
                    self._trees.popitem(last=False)
        return tree

    def split(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        target_bytes: int, max_partitions: int,
    ) -> list[list[PinnedTable]]:
        """The pins of each endpoint of a planned query: several when it is a row-wise scan of
        one table whose data files (after manifest pruning) exceed ``target_bytes``, else one.

        Planned from manifests only; each endpoint's pins name part k of n (``splits``).
        """
        data = [p for p in pins if p.kind == "data"]
        if len(pins) != 1 or len(data) != 1 or data[0].snapshot_id is None or max_partitions <= 1:
            return [pins]
        kind = self._statement_type(sql)
        if kind != "SELECT" or not splits.splittable(self._checked_tree(sql, kind, None).statement):
            return [pins]
        pin = data[0]
        snapshot_id = pin.snapshot_id
        assert snapshot_id is not None  # checked above
        table = self.catalog.load_table((*pin.namespace, pin.name))
        schema = table.schemas().get(pin.schema_id) or table.schema()
        units = splits.scan_units(self.sources.data_files(table, snapshot_id, row_filter(sql, schema)))
        n = splits.partition_count(sum(u.bytes for u in units), len(units), target_bytes, max_partitions)
        if n <= 1:
            return [pins]
        return [[dataclasses.replace(pin, split=(k, n))] for k in range(n)]

    def _missing_table(self, parts: tuple[str, ...], default_schema: tuple[str, ...] | None) -> Exception:
        """NOT_FOUND for a name that is no icefloe table, suggesting only icefloe tables."""
        name = messages.scrub(".".join(parts))
        if len(parts) == 1 and not default_schema:
            return errors.NotFound(f"table {name} does not exist (name its namespace: ns.{name})")
        candidates = name_candidates(parts, default_schema)
        hint = ""
        if candidates:
            ns, table = candidates[0]
            hint = table_hint(self.catalog, ns, table)
        return errors.NotFound(f"table {name} does not exist{hint}")

    def _pin_one(self, ns: tuple[str, ...], table: str) -> PinnedTable | None:
        try:
            tbl = self.catalog.load_table((*ns, table))
            kind, view = "data", None
        except (NoSuchTableError, NoSuchNamespaceError, ValueError):
            meta = history.metadata_table_name(table)
            if meta is None:
                return None
            try:
                tbl = self.catalog.load_table((*ns, meta[0]))
            except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                return None
            kind, view, table = meta[1], table, meta[0]
        snap = tbl.metadata.current_snapshot()
        return PinnedTable(ns, table, snap.snapshot_id if snap else None, tbl.metadata.current_schema_id, view, kind)

    def describe(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None, params: list[Any] | None = None
    ) -> tuple[pa.Schema, pa.Schema]:
        """Result schema and parameter schema of a query, without running it (remembered:
        ``engine.bound``)."""
        key = self.bound.key(sql, default_schema, pins) if params is None else None
        known = self.bound.get(key)
        if known is not None:
            return known.schema, known.parameters
        slot = self.slots.take()
        cur = slot.cursor()
        run = Running(slot, cur, None, 0.0)
        try:
            self._setup(run, pins, default_schema)
            sig = _seam.bind(cur, sql, values=params)
            if sig.writes:
                raise errors.InvalidArgument("this statement writes; send it as an update")
            schema = arrow_schema(cur, sig.names, sig.types)
            param_schema = arrow_schema(cur, [f"${n}" for n, _ in sig.parameters], [t for _, t in sig.parameters])
            self.bound.put(key, Bound(schema, param_schema, tuple(str(t) for t in sig.types)))
            return schema, param_schema
        except duckdb.Error as exc:
            raise messages.map_duckdb(exc) from None
        finally:
            self.runs.release(run)

    def execute(
        self,
        sql: str,
        pins: list[PinnedTable],
        default_schema: tuple[str, ...] | None,
        params: list[Any] | None = None,
        context: Any = None,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None = None,
    ) -> pa.RecordBatchReader:
        """Start the query; the reader streams from DuckDB and frees its slot when dropped."""
        reader, run = self._start(sql, pins, default_schema, params, context, file_tags)
        weakref.finalize(reader, self.runs.release, run)
        return reader

    def _start(
        self,
        sql: str,
        pins: list[PinnedTable],
        default_schema: tuple[str, ...] | None,
        params: list[Any] | None,
        context: Any,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None, file_positions: bool = False,
        file_deletes: dict[str, Any] | None = None,
    ) -> tuple[pa.RecordBatchReader, Running]:
        slot = self.slots.take()
        run = Running(slot, slot.cursor(), context, time.monotonic() + self.query_timeout_s)
        self.watchdog.add(run)
        self.runs.follow_call(run)
        try:
            # Whatever the caller (a ticket) says, only a query inside the policy runs.
            self.check(sql, default_schema, pins, run.cursor)
            reader = self._known_plain_scan(run, sql, pins, default_schema) if not params and not file_tags else None
            if reader is not None:
                return reader, run
            self._setup(run, pins, default_schema, sql, file_tags, file_positions, file_deletes)
            sig = _seam.bind(run.cursor, sql, values=params)
            if sig.writes:
                raise errors.InvalidArgument("this statement writes; send it as an update")
            if not params:
                target = arrow_schema(run.cursor, sig.names, sig.types)
                reader = self.scans.plain_scan(run, sql, target, [str(t) for t in sig.types])
            if reader is None:
                self.scans.native_scan(run, pins, sql)
            if reader is None:
                # From here on only the client's statement runs on this cursor: DuckDB's count
                # of name-changing statements must not move (see SlotPool).
                run.catalog_version = _seam.catalog_version(run.cursor)
                reader = run.cursor.sql(sql, params=params).to_arrow_reader(BATCH_ROWS)
        except BaseException as exc:
            run.failed = True
            self.runs.release(run)
            if isinstance(exc, duckdb.Error):
                raise self._failure(run, exc) from None
            raise
        return reader, run

    def _known_plain_scan(
        self, run: Running, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> pa.RecordBatchReader | None:
        """A plain scan of one table whose binding is known (``engine.bound``), streamed with no
        DuckDB statement at all; None where the full path must run."""
        if len(pins) != 1 or pins[0].kind != "data":
            return None
        known = self.bound.get(self.bound.key(sql, default_schema, pins))
        if known is None:
            return None
        run.parts = self._data_parts(pins[0], sql, prune=True)
        reader = self.scans.plain_scan(run, sql, known.schema, list(known.type_names))
        if reader is None:
            run.parts = []
            return None
        run.cursor_reusable = True  # nothing was registered or set on it
        return reader

    def column_types(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        params: list[Any] | None = None,
    ) -> list[tuple[str, str]]:
        """(name, DuckDB type) of each result column of a query, without running it (SQL writes)."""
        slot = self.slots.take()
        cur = slot.cursor()
        run = Running(slot, cur, None, 0.0)
        try:
            self._setup(run, pins, default_schema)
            sig = _seam.bind(cur, sql, values=params)
            return [(str(n), str(t)) for n, t in zip(sig.names, sig.types, strict=True)]
        except duckdb.Error as exc:
            raise messages.map_duckdb(exc) from None
        finally:
            self.runs.release(run)

    def query_table(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        params: list[Any] | None = None, context: Any = None,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None = None, file_positions: bool = False,
        file_deletes: dict[str, Any] | None = None,
    ) -> pa.Table:
        """Run a query to completion (the read part of a SQL write); ``file_positions``: the
        ``file_tags`` sources also have ``__icefloe_pos`` (see ``IcebergSources.file_parts``);
        ``file_deletes``: the deletes of the tagged files, when the caller has planned them.

        The query is released before returning, not when the reader is collected: a reader
        kept alive by a traceback would leave the query registered with the watchdog, which
        would then ask a finished RPC's context whether it was cancelled.
        """
        reader, run = self._start(sql, pins, default_schema, params, context, file_tags, file_positions,
                                  file_deletes)
        try:
            return reader.read_all()
        except duckdb.Error as exc:
            raise self._failure(run, exc) from None
        except (pa.ArrowException, OSError) as exc:
            raise _stream_failure(run, exc) from None
        finally:
            reader.close()
            self.runs.release(run)

    def stream(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        params: list[Any] | None = None, context: Any = None,
    ) -> Generator[pa.RecordBatch, None, None]:
        """Run a query and yield its batches as DuckDB produces them (the read part of an INSERT).

        Released explicitly when the caller stops iterating (see ``query_table``).
        """
        reader, run = self._start(sql, pins, default_schema, params, context, None)
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except duckdb.Error as exc:
                    raise self._failure(run, exc) from None
                except (pa.ArrowException, OSError) as exc:
                    raise _stream_failure(run, exc) from None
                yield batch
        finally:
            reader.close()
            self.runs.release(run)

    def _failure(self, run: Running, exc: duckdb.Error) -> Exception:
        run.failed = True  # its slot is audited before reuse
        if run.interrupted == "timeout":
            return errors.DeadlineExceeded(f"query exceeded the {self.query_timeout_s:g}s timeout")
        if run.interrupted == "cancelled":
            return errors.Cancelled("query cancelled")
        if run.interrupted == "shutdown":
            return errors.Unavailable("the server is shutting down; retry")
        return messages.map_duckdb(exc)

    # -- sources --------------------------------------------------------------------------

    def _setup(
        self, run: Running, pins: list[PinnedTable], default_schema: tuple[str, ...] | None, sql: str | None = None,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None = None, file_positions: bool = False,
        file_deletes: dict[str, Any] | None = None,
    ) -> None:
        """Register each pinned table's sources and name them; ``sql`` (execution only) prunes files.

        ``file_tags`` (SQL writes): for those tables, read exactly the given data files, each
        through its own source, with an extra column ``__icefloe_file`` = the file's index in
        the list, so a DELETE / UPDATE can tell which files its predicate touches. Such views,
        and metadata tables, never take the native / plain scan shortcuts (``run.parts`` empty).
        """
        cur = run.cursor
        run.parts = []
        for i, pin in enumerate(pins):
            tagged = (file_tags or {}).get((pin.namespace, pin.name))
            if pin.kind != "data":
                table = self._pinned_table(pin)
                parts = [SourcePart(history.metadata_table(table, pin.kind, pin.snapshot_id), "*")]
            elif tagged is not None:
                table = self._pinned_table(pin)
                parts = self.sources.file_parts(
                    table, tagged, table.schemas().get(pin.schema_id) or table.schema(), pin.snapshot_id,
                    file_positions, file_deletes,
                )
            else:
                parts = self._data_parts(pin, sql, prune=sql is not None and len(pins) == 1)
                run.parts = parts if len(pins) == 1 else []
            selects = []
            for j, part in enumerate(parts):
                src = f"__icefloe_src_{i}_{j}"
                cur.register(src, part.data)
                selects.append(f"SELECT {part.select_list} FROM {src}")
            schema_name = quote(".".join(pin.namespace))
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{schema_name}")
            view = f"{CATALOG_NAME}.{schema_name}.{quote(pin.view_name)}"
            cur.execute(f"CREATE OR REPLACE VIEW {view} AS {' UNION ALL '.join(selects)}")
            run.views.append(view)
        if default_schema and any(pin.namespace == default_schema for pin in pins):
            # Only then can an unqualified name mean an icefloe table (the policy checked that
            # every table reference is one of the pins).
            path = f"{CATALOG_NAME}.{quote('.'.join(default_schema))},{CATALOG_NAME}.main"
            cur.execute("SET search_path = '" + path.replace("'", "''") + "'")
        # Only a cursor with no source registered and no search_path set may serve another query.
        run.cursor_reusable = not pins

    def _pinned_table(self, pin: PinnedTable) -> Any:
        """The pinned table, refusing a pinned snapshot that no longer exists."""
        # A write inside a transaction reads its target at the transaction's staged snapshot.
        table = staged_table(self.catalog, pin.namespace, pin.name)
        if table is None:
            table = self.catalog.load_table((*pin.namespace, pin.name))
        if pin.snapshot_id is not None and table.metadata.snapshot_by_id(pin.snapshot_id) is None:
            raise errors.FailedPrecondition(
                f"snapshot {pin.snapshot_id} of {'.'.join((*pin.namespace, pin.name))} no longer exists; "
                "run the query again"
            )
        return table

    def _data_parts(self, pin: PinnedTable, sql: str | None, prune: bool) -> list[SourcePart]:
        """The sources of a pinned data table (its files pruned by ``sql``'s filter if ``prune``)."""
        table = self._pinned_table(pin)
        schema = table.schemas().get(pin.schema_id) or table.schema()
        row_prune = row_filter(sql, schema) if prune and sql is not None else None
        return self.sources.parts(table, pin.snapshot_id, schema, row_prune, pin.split)

def _check_key(sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable]) -> bytes:
    spec = repr((sql, default_schema, sorted((p.namespace, p.view_name) for p in pins)))
    return hashlib.blake2b(spec.encode(), digest_size=16).digest()


def _stream_failure(run: Running, exc: BaseException) -> Exception:
    """An error DuckDB raised while producing batches reaches Python through Arrow's C stream
    as ``OSError`` / ``ArrowException`` with DuckDB's message: map it like the DuckDB error."""
    if run.interrupted == "timeout":
        return errors.DeadlineExceeded("query exceeded its timeout")
    if run.interrupted == "cancelled":
        return errors.Cancelled("query cancelled")
    return errors.InvalidArgument(messages.clean(exc))
