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
table never see each other's views. The pool size is the cap on concurrent queries. (A slot
made for a set of local files keeps its ``read_parquet`` views over them for its next query;
each query still defines every table it names, reusing a kept view only when its text is the
very one it needs: ``Slot.keep_view``.)

Sandbox, three walls: (1) DuckDB settings, then ``lock_configuration``: no external access
(no file reads, writes, globbing, ATTACH of files, extension installs), no extension
autoloading, no Python replacement scans; (2) ``policy``: only single queries run, checked on
DuckDB's parse tree (allowed table functions, no server-revealing functions, table references
that are icefloe tables or CTEs), at planning and again at execution, whatever a ticket says;
(3) ``slots``: a slot that is not pristine after a query is discarded. DuckDB spills to a
private folder (``slots.SpillFolder``). No slot allows a directory (verified with DuckDB 2.0.1:
``allowed_directories`` would let ``COPY ... TO`` write anywhere inside it); a slot that reads
local tables natively allows exactly the real paths of the pinned snapshots' files
(``native_tables``), fixed when the slot is made and locked with the rest.

Bounded work: statements are capped in size; planning (parsing, ``AT`` evaluation) runs on a
cursor the watchdog interrupts at the query's deadline, like the query itself.

Scan paths (all produce the schema the sandbox binder gives, so GetFlightInfo and DoGet
agree): plain ``SELECT cols FROM t`` streams the pinned files' Arrow datasets with no SQL engine
(or DuckDB's reader in an internal database that runs only SQL icefloe writes, where a column
needs a cast); every other query reads local tables through ``read_parquet`` views in its
slot (``native_tables``: DuckDB's own decoder and footer row counts for its join order; for
the reads of SQL writes, with each row's file and position: ``native_writes``), and S3 tables,
or shapes the field-id mapping cannot express, as Arrow datasets inside the sandbox.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from catalog.lineage import index as lineage_index
from flight_server import errors
from flight_server.engine import duckdb_seam, history, messages, policy
from flight_server.engine.bound import Bound, BoundSchemas
from flight_server.engine.iceberg_source import IcebergSources, SourcePart, quote
from flight_server.engine.native_tables import NativeTable, NativeTables
from flight_server.engine.native_writes import tagged_table
from flight_server.engine.origins import ColumnOrigin
from flight_server.engine.planner import QueryPlanner
from flight_server.engine.pushdown import ALWAYS_TRUE, plain_projection, row_filter
from flight_server.engine.runs import QueryRuns, run_failure
from flight_server.engine.scans import BATCH_ROWS, ScanPaths, arrow_schema
from flight_server.engine.slots import CATALOG_NAME, Slot, SlotPool, SpillFolder
from flight_server.engine.table_reads import TableReads
from flight_server.engine.tables import LINEAGE_KINDS, PinnedTable
from flight_server.engine.watchdog import Running, Watchdog
from flight_server.transactions import staged_table

if TYPE_CHECKING:
    from flight_server.config import Config

logger = logging.getLogger("icefloe.engine")

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
        # Set by the server: waits until the lineage index holds every landed commit.
        self.lineage_ready: Callable[[], Any] | None = None
        # Set when the server begins to shut down: running queries are interrupted so their
        # streams end and gRPC can drain.
        self._server_stopping = stopping or threading.Event()
        self.query_timeout_s = query_timeout_s
        self.sources = IcebergSources()
        self.natives = NativeTables(self.sources)
        # Each table read once per metadata version (planning loads afresh; see table_reads).
        self.tables = TableReads(catalog)
        self.bound = BoundSchemas(self.tables)
        self._threads = threads
        self._memory_limit = memory_limit
        self.spill = SpillFolder(spill_parent)
        messages.register_private_path(str(self.spill.path))
        warehouse = getattr(catalog, "warehouse_path", None) or getattr(catalog, "properties", {}).get("warehouse")
        if isinstance(warehouse, str):
            messages.register_private_path(warehouse.removeprefix("file://"))
        self._parser = Slot(threads)  # parsing, policy checks, AT values; never sees a table
        # Native Parquet reads for plain and selective scans (SQL icefloe writes, never the client's).
        self.scans = ScanPaths(catalog, self.spill.new_folder(), self.tables)
        # Each running query owns a slot, so the views naming its pinned snapshots cannot clash
        # with another query's; the pool size is the cap on concurrent queries.
        self.slots = SlotPool(max_concurrent, self._new_slot)
        self.watchdog = Watchdog(self._server_stopping)
        self.runs = QueryRuns(self.slots, self.watchdog)
        self.planner = QueryPlanner(catalog, self._parser, self.sources, self.watchdog, self.runs, query_timeout_s,
                                    self.tables)

    def close(self) -> None:
        self.watchdog.close()
        self.spill.remove()

    def _new_slot(self, files: frozenset[str], single_thread: bool = False, unordered: bool = False) -> Slot:
        return Slot(self._threads, self.spill.new_folder(), self._memory_limit, files, single_thread, unordered)

    def _take_slot(
        self, pins: list[PinnedTable], sql: str | None,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None = None, file_positions: bool = False,
        file_deletes: dict[str, Any] | None = None,
    ) -> tuple[Slot, dict[int, NativeTable]]:
        """A slot for the query, and the pins (by index) it reads with DuckDB's own Parquet
        reader (``native_tables``, ``native_writes``): the slot may read exactly their checked files."""
        if file_tags:
            native = self._native_writes(pins, file_tags, file_positions, file_deletes)
        else:
            native = self._native_tables(pins, sql)
        files = frozenset(f for table in native.values() for f in table.files)
        # A query of no table and no table function (SELECT 1, SELECT now()) has nothing to
        # run in parallel: a one-thread slot answers it without a hand-off to DuckDB's workers.
        single = not pins and sql is not None and self.planner.reads_nothing(sql)
        unordered = any(table.unordered for table in native.values())
        return self.slots.take(files=files, single_thread=single, unordered=unordered), native

    def _native_writes(
        self, pins: list[PinnedTable], file_tags: dict[tuple[tuple[str, ...], str], list[str]],
        file_positions: bool, file_deletes: dict[str, Any] | None,
    ) -> dict[int, NativeTable]:
        """The tagged targets of a SQL write read by DuckDB's reader, each file's index (and row
        positions) with it; other pins of the statement keep their Arrow sources."""
        found = {}
        for i, pin in enumerate(pins):
            tagged = file_tags.get((pin.namespace, pin.name))
            if tagged is None or pin.kind != "data":
                continue
            table = self._pinned_table(pin)
            schema = table.schemas().get(pin.schema_id) or table.schema()
            if file_deletes is not None:
                deletes = file_deletes
            else:
                deletes = self.sources.file_deletes(table, pin.snapshot_id) if pin.snapshot_id is not None else {}
            native = tagged_table(self.natives, table, pin.snapshot_id, schema, tagged, deletes, file_positions,
                                  f"__icefloe_write_{i}", self.slots.covering)
            if native is not None:
                found[i] = native
        return found

    def _native_tables(self, pins: list[PinnedTable], sql: str | None) -> dict[int, NativeTable]:
        if sql is not None and len(pins) == 1 and plain_projection(sql) is not None:
            return {}  # plain scans stream the Arrow datasets with no SQL engine (scans.plain_scan)
        found = {}
        for i, pin in enumerate(pins):
            if pin.kind != "data":
                continue
            table = self._pinned_table(pin)
            schema = table.schemas().get(pin.schema_id) or table.schema()
            # The same pruning as _data_parts, so planning and execution bind the same files.
            prune = row_filter(sql, schema) if sql is not None and len(pins) == 1 else None
            # The statement's one table, with no filter to push into its scan: its position
            # deletes may be a POSITIONAL JOIN per file (which takes no filter below it).
            whole = prune is ALWAYS_TRUE
            native = self.natives.native_table(table, pin.snapshot_id, schema, prune, pin.split,
                                               f"__icefloe_positions_{i}", whole=whole)
            if native is not None:
                found[i] = native
        return found

    # -- statements (``planner.QueryPlanner``) -------------------------------------------

    def classify(self, sql: str) -> str:
        return self.planner.classify(sql)

    def check(self, sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable],
              cur: duckdb.DuckDBPyConnection | None = None) -> policy.QueryTree | None:
        return self.planner.check(sql, default_schema, pins, cur)

    def column_origins(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> list[ColumnOrigin | None]:
        return self.planner.column_origins(sql, pins, default_schema)

    @classmethod
    def for_config(cls, catalog: Any, config: Config, stopping: threading.Event) -> Engine:
        """The engine a server (the primary or a read worker) runs for ``config``'s limits."""
        return cls(catalog, query_timeout_s=config.query_timeout_s, max_concurrent=config.max_concurrent_queries,
                   stopping=stopping, memory_limit=config.memory_limit)

    def plan(self, sql: str, default_schema: tuple[str, ...] | None,
             context: Any = None) -> tuple[str, list[PinnedTable]]:
        return self.planner.plan(sql, default_schema, context)

    def split(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        target_bytes: int, max_partitions: int,
    ) -> list[list[PinnedTable]]:
        return self.planner.split(sql, pins, default_schema, target_bytes, max_partitions)

    def describe(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None, params: list[Any] | None = None
    ) -> tuple[pa.Schema, pa.Schema]:
        """Result schema and parameter schema of a query, without running it (remembered:
        ``engine.bound``)."""
        key = self.bound.key(sql, default_schema, pins) if params is None else None
        known = self.bound.get(key)
        if known is not None:
            return known.schema, known.parameters
        with self._bound_statement(sql, pins, default_schema, params) as (cur, sig):
            if sig.writes:
                raise errors.InvalidArgument("this statement writes; send it as an update")
            schema = arrow_schema(cur, sig.names, sig.types)
            param_schema = arrow_schema(cur, [f"${n}" for n, _ in sig.parameters], [t for _, t in sig.parameters])
            self.bound.put(key, Bound(schema, param_schema, tuple(str(t) for t in sig.types)))
            return schema, param_schema

    @contextmanager
    def _bound_statement(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None, params: list[Any] | None
    ) -> Iterator[tuple[duckdb.DuckDBPyConnection, duckdb_seam.BoundStatement]]:
        """``sql`` bound, not run, on a slot set up for ``pins``: the cursor and what binding
        told. DuckDB errors in the block are mapped to client errors; the slot is released after."""
        slot, native = self._take_slot(pins, sql)
        cur = slot.cursor()
        run = Running(slot, cur, None, 0.0)
        try:
            self._setup(run, pins, default_schema, native=native)
            yield cur, duckdb_seam.bind(cur, sql, values=params)
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
        annotate: Callable[[pa.Schema], pa.Schema] | None = None,
    ) -> pa.RecordBatchReader:
        """Start the query; the reader streams from DuckDB and frees its slot when dropped.

        ``annotate`` gives the schema the caller streams (column metadata, NOT NULL flags): the
        reader casts to it here, in C++, per batch. A caller must not wrap the reader in another
        that reads it from C++ (``reader.cast``): the wrapper holds the stream, not this Python
        object, so dropping this object would end the query (its slot and kept cursor given to
        the next query) while the wrapper still reads from it."""
        reader, run = self._start(sql, pins, default_schema, params, context, file_tags)
        if annotate is not None:
            target = annotate(reader.schema)
            if not target.equals(reader.schema, check_metadata=True):
                reader = reader.cast(target)
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
        slot, native = self._take_slot(pins, sql, file_tags, file_positions, file_deletes)
        run = Running(slot, slot.cursor(), context, time.monotonic() + self.query_timeout_s)
        self.watchdog.add(run)
        self.runs.follow_call(run)
        try:
            # Whatever the caller (a ticket) says, only a query inside the policy runs.
            self.check(sql, default_schema, pins, run.cursor)
            reader = self._known_plain_scan(run, sql, pins, default_schema) if not params and not file_tags else None
            if reader is not None:
                return reader, run
            self._setup(run, pins, default_schema, sql, file_tags, file_positions, file_deletes, native)
            # A native read (or one of no table) has no Arrow parts for the scan shortcuts
            # below, and when describe bound this very statement (and found it does not
            # write) binding it again, a binding of every read_parquet it names, would learn
            # nothing.
            known = (self.bound.get(self.bound.key(sql, default_schema, pins))
                     if (native or not pins) and not params else None)
            if known is None:
                sig = duckdb_seam.bind(run.cursor, sql, values=params)
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
                run.catalog_version = duckdb_seam.catalog_version(run.cursor)
                if params:
                    reader = run.cursor.sql(sql, params=params).to_arrow_reader(BATCH_ROWS)
                else:
                    reader = duckdb_seam.stream(run.cursor, sql, BATCH_ROWS)
                if native and self.planner.is_explain(sql):
                    # A read_parquet plan lists the files it reads: server paths, never sent.
                    reader = _scrubbed(reader)
        except BaseException as exc:
            run.failed = True
            self.runs.release(run)
            if isinstance(exc, duckdb.Error):
                raise run_failure(run, self.query_timeout_s, exc) from None
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
        with self._bound_statement(sql, pins, default_schema, params) as (_, sig):
            return [(str(n), str(t)) for n, t in zip(sig.names, sig.types, strict=True)]

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
            raise run_failure(run, self.query_timeout_s, exc) from None
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
                    raise run_failure(run, self.query_timeout_s, exc) from None
                except (pa.ArrowException, OSError) as exc:
                    raise _stream_failure(run, exc) from None
                yield batch
        finally:
            reader.close()
            self.runs.release(run)

    # -- sources --------------------------------------------------------------------------

    def _setup(
        self, run: Running, pins: list[PinnedTable], default_schema: tuple[str, ...] | None, sql: str | None = None,
        file_tags: dict[tuple[tuple[str, ...], str], list[str]] | None = None, file_positions: bool = False,
        file_deletes: dict[str, Any] | None = None, native: dict[int, NativeTable] | None = None,
    ) -> None:
        """Register each pinned table's sources and name them; ``sql`` (execution only) prunes files.

        ``native``: the pins (by index) read by DuckDB's own Parquet reader: their view is a
        ``read_parquet`` of the files the slot was made for (``native_tables``); only a SQL
        write's read, or a scan applying more cached positions than a slot keeps, registers
        something (``NativeTable.registered``); smaller position tables are the slot's own,
        kept across queries (``NativeTable.kept``, ``Slot.hold_tables``).

        ``file_tags`` (SQL writes): for those tables, read exactly the given data files, each
        through its own source, with an extra column ``__icefloe_file`` = the file's index in
        the list, so a DELETE / UPDATE can tell which files its predicate touches. Such views,
        and metadata tables, never take the native / plain scan shortcuts (``run.parts`` empty).
        """
        cur = run.cursor
        run.parts = []
        # Tables of deleted rows the slot keeps across queries: all in place before any view
        # (making room may drop the slot's kept views).
        run.slot.hold_tables([kept for table in (native or {}).values() for kept in table.kept])
        for i, pin in enumerate(pins):
            tagged = (file_tags or {}).get((pin.namespace, pin.name))
            schema_name = quote(".".join(pin.namespace))
            namespace = ".".join(pin.namespace)
            if native and i in native:
                if native[i].registered:
                    # A view over Arrow tables registered on this cursor (a SQL write's earlier
                    # positions, ``native_writes``; a shared delete file's positions per data
                    # file, ``native_tables``) lives only as long as this query.
                    run.slot.forget_view(namespace, pin.view_name)
                    for name, data in native[i].registered:
                        cur.register(name, data)
                    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{schema_name}")
                    view = f"{CATALOG_NAME}.{schema_name}.{quote(pin.view_name)}"
                    cur.execute(f"CREATE OR REPLACE VIEW {view} AS {native[i].select}")
                    run.views.append(view)
                    continue
                # The slot was made for exactly these files; its view of the same text, kept
                # from an earlier query, is this one (``Slot.keep_view``).
                body = native[i].select
                if not run.slot.has_view(namespace, pin.view_name, body):
                    if namespace not in run.slot.kept_schemas:
                        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{schema_name}")
                    view = f"{CATALOG_NAME}.{schema_name}.{quote(pin.view_name)}"
                    cur.execute(f"CREATE OR REPLACE VIEW {view} AS {body}")
                    run.slot.keep_view(namespace, pin.view_name, body, view)
                continue
            run.slot.forget_view(namespace, pin.view_name)
            if pin.kind in LINEAGE_KINDS:
                if self.lineage_ready is not None:
                    self.lineage_ready()  # what was committed before this query is in the index
                parts = [SourcePart(lineage_index.read_table(self.catalog.store, pin.name), "*")]
            elif pin.kind != "data":
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
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{schema_name}")
            view = f"{CATALOG_NAME}.{schema_name}.{quote(pin.view_name)}"
            cur.execute(f"CREATE OR REPLACE VIEW {view} AS {' UNION ALL '.join(selects)}")
            run.views.append(view)
        searched = bool(default_schema and any(pin.namespace == default_schema for pin in pins))
        if searched:
            # Only then can an unqualified name mean an icefloe table (the policy checked that
            # every table reference is one of the pins).
            assert default_schema is not None
            path = f"{CATALOG_NAME}.{quote('.'.join(default_schema))},{CATALOG_NAME}.main"
            cur.execute("SET search_path = '" + path.replace("'", "''") + "'")
        # Only a cursor with no source registered and no search_path set may serve another
        # query: one of no table, or one whose tables are all the slot's kept read_parquet views
        # (a new cursor and its USE cost ~0.3 ms, twice per point lookup).
        run.cursor_reusable = not searched and all(
            native is not None and i in native and not native[i].registered for i in range(len(pins)))

    def _pinned_table(self, pin: PinnedTable) -> Any:
        """The pinned table, refusing a pinned snapshot that no longer exists."""
        # A write inside a transaction reads its target at the transaction's staged snapshot.
        table = staged_table(self.catalog, pin.namespace, pin.name)
        if table is None:
            table = self.tables.load(pin.namespace, pin.name)
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

def _scrubbed(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """An EXPLAIN's answer (a few rows) with server paths rewritten as in error messages."""
    table = reader.read_all()
    columns = [
        pa.array([None if v is None else messages.scrub(v) for v in column.to_pylist()], column.type)
        if pa.types.is_string(column.type) else column
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, schema=table.schema).to_reader()


def _stream_failure(run: Running, exc: BaseException) -> Exception:
    """An error DuckDB raised while producing batches reaches Python through Arrow's C stream
    as ``OSError`` / ``ArrowException`` with DuckDB's message: map it like the DuckDB error."""
    if run.interrupted == "timeout":
        return errors.DeadlineExceeded("query exceeded its timeout")
    if run.interrupted == "cancelled":
        return errors.Cancelled("query cancelled")
    return errors.InvalidArgument(messages.clean(exc))
