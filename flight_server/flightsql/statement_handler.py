"""Flight SQL statements: queries, updates and prepared statements (``CommandStatementQuery``,
``CommandStatementUpdate``, ``CommandPreparedStatement*``, ``CreatePreparedStatement``).

A query is planned at GetFlightInfo (snapshots pinned, the sandbox policy checked) and its
sealed handle comes back as the ticket its DoGet runs; a write statement runs through the SQL
writer, at GetFlightInfo when sent as a query (its result is the row count). icefloe's own
statements (``CALL icefloe....``) go to ``flightsql.calls``. Every statement lands in the
query log.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from catalog import RocksCatalog
from flight_server import errors
from flight_server.engine import Engine, Kind
from flight_server.engine.sql_text import parameter_markers
from flight_server.engine.tables import LINEAGE_KINDS
from flight_server.flightsql import calls
from flight_server.flightsql import metadata as md
from flight_server.flightsql import protocol as p
from flight_server.flightsql.session_handler import SessionHandler
from flight_server.flightsql.statements import (
    HandleCodec,
    PreparedHandle,
    StatementHandle,
    bound_rows,
    param_rows,
    read_parameters,
)
from flight_server.flightsql.ticket_runner import TicketRunner
from flight_server.flightsql.transaction_handler import CONTROL, TransactionHandler, is_data_change
from flight_server.observability.querylog import QueryLog
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer
from flight_server.sqlwrite import SqlWriter
from flight_server.sqlwrite.params import client_parameter_schema, write_parameter_schema
from flight_server.transactions import ACTIVE

T = TypeVar("T")
# Set on an exception already written to the query log (a write that failed inside planning).
_LOGGED = "_icefloe_querylogged"
# What a write statement sent as a query returns: the number of rows it affected.
WRITE_RESULT_SCHEMA = pa.schema([pa.field("count", pa.int64())])


class StatementHandler:
    """Plans, runs and logs SQL statements for the dispatcher."""

    def __init__(self, engine: Engine, handles: HandleCodec, icefloe_calls: calls.IcefloeCalls,
                 sessions: SessionHandler, transactions: TransactionHandler, writer: SqlWriter, querylog: QueryLog,
                 authorizer: Authorizer, catalog: RocksCatalog, locations: list[flight.Location],
                 read_worker: Callable[[], flight.Location | None] = lambda: None) -> None:
        self.engine = engine
        self.handles = handles
        self.calls = icefloe_calls
        self.sessions = sessions
        self.transactions = transactions
        self.writer = writer
        self.querylog = querylog
        self.authorizer = authorizer
        self.catalog = catalog
        # Endpoints name the fleet that can run them (any server on the warehouse), or no one:
        # the spec's "this same server".
        self.locations = locations
        # DoGet's half of a query: here, and the same code in every read worker.
        self.runner = TicketRunner(engine, handles, querylog, self._reading_own_writes)
        # The read worker a ticket may be sent to (flight_server.workers), None: none is up.
        self.read_worker = read_worker

    def _endpoint(self, ticket: bytes, handle: StatementHandle) -> flight.FlightEndpoint:
        """One endpoint; a plain read goes to the next read worker when there are any (a
        transaction's own writes and the lineage tables live in this process only)."""
        if handle.transaction_id is None and handle.written is None and not any(
                pin.kind in LINEAGE_KINDS for pin in handle.pins):
            worker = self.read_worker()
            if worker is not None:
                return flight.FlightEndpoint(ticket, [worker, *self.locations])
        return flight.FlightEndpoint(ticket, self.locations)

    def flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, sql: str,
        default_schema: tuple[str, ...] | None, params: pa.RecordBatch | None,
    ) -> flight.FlightInfo:
        total_records = -1
        call = recognised(sql, params)
        if call is not None:
            principal = self.authorizer.authorize(context, roles.SQL_STATEMENTS[f"icefloe.{call.function}"])
            target, most = self.sessions.scan_options(context)
            return self.calls.flight_info(context, descriptor, call, sql, principal, target, most,
                                          self.locations)
        handle = self._logged_plan(context, sql, default_schema, params)
        if handle.written is not None:
            # A write sent as a query ran here, at GetFlightInfo; the result is its row count.
            total_records = handle.written
        rows = param_rows(handle.params)
        schema, _ = self.engine.describe(handle.sql, handle.pins, handle.default_schema, rows[0] if rows else None)
        schema = self.runner.annotated(schema, handle)
        endpoints = [self._endpoint(p.TicketStatementQuery(self.handles.statement(h)).pack(), h)
                     for h in self._endpoints(context, handle)]
        # Several endpoints are disjoint parts of one scan, in no particular order.
        return flight.FlightInfo(schema, descriptor, endpoints, total_records, -1, ordered=False)

    def _endpoints(self, context: flight.ServerCallContext, handle: StatementHandle) -> list[StatementHandle]:
        """One handle per endpoint: a row-wise scan of one table is split by data files."""
        if handle.written is not None or handle.params is not None:
            return [handle]
        target, most = self.sessions.scan_options(context)
        groups = self.engine.split(handle.sql, handle.pins, handle.default_schema, target, most)
        return [StatementHandle(handle.sql, handle.default_schema, pins, None, transaction_id=handle.transaction_id,
                                principal=handle.principal)
                for pins in groups]

    def _plan(
        self,
        context: flight.ServerCallContext,
        sql: str,
        default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None = None,
    ) -> StatementHandle:
        """Authorize, classify, and pin the snapshots of the tables a query reads.

        A write statement runs here (Flight SQL clients may send DDL/DML as a query); its handle
        then reads back a one-row ``count`` result and carries the count in ``written``.
        """
        principal = self.authorizer.authorize(context, roles.SQL_STATEMENTS["query"])
        if default_schema is None:
            default_schema = self.sessions.default_schema(context)
        if CONTROL.match(sql):
            self.transactions.control(context, sql)
            handle = StatementHandle("SELECT CAST(0 AS BIGINT) AS count", default_schema, [], None)
            handle.written = 0
            return handle
        if self.engine.classify(sql) == Kind.WRITE:
            count = self._write(context, sql, default_schema, params)
            handle = StatementHandle(f"SELECT CAST({count} AS BIGINT) AS count", default_schema, [], None)
            handle.written = count
            return handle
        sql, pins = self.engine.plan(sql, default_schema, context)
        handle = StatementHandle(sql, default_schema, pins, params, principal=principal)
        txn = ACTIVE.get()  # the engine pinned the transaction's view (transactions.read_pins)
        if txn is not None and any((*pin.namespace, pin.name) in txn.tables for pin in pins):
            # DoGet must read the transaction's staged snapshots: the ticket names it.
            handle.transaction_id = self.transactions.transactions.seal(txn.id, txn.principal)
        return handle

    def _logged_plan(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> StatementHandle:
        """``_plan``, with a query refused at planning in the query log (writes log themselves;
        a query that plans is logged when its DoGet stream ends)."""
        return self.refusals_logged(context, sql, lambda: self._plan(context, sql, default_schema, params))

    def refusals_logged(self, context: flight.ServerCallContext, sql: str, step: Callable[[], T]) -> T:
        """Run ``step`` for statement ``sql``; if it fails, the statement goes to the query log."""
        started = time.perf_counter()
        try:
            return step()
        except Exception as exc:
            if not getattr(exc, _LOGGED, False):
                self.querylog.record(sql, self.authorizer.principal_name(context), started, errors.status_of(exc))
            raise

    def _write(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        """Run a write statement (DDL / DML) through the SQL writer (at most one commit per
        parameter row; an INSERT with several rows is one commit), and log it."""
        started = time.perf_counter()
        try:
            count = self._run_write(context, sql, default_schema, params)
        except Exception as exc:
            self.querylog.record(sql, self.authorizer.principal_name(context), started, errors.status_of(exc))
            with contextlib.suppress(AttributeError, TypeError):  # a few built-in exceptions take no attributes
                setattr(exc, _LOGGED, True)
            raise
        self.querylog.record(sql, self.authorizer.principal_name(context), started, "OK", rows=count)
        return count

    def _run_write(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        # DML or DDL (both write); the SQL writer asks more where a statement needs it
        principal = self.authorizer.authorize(context, roles.SQL_STATEMENTS["dml"])
        if default_schema is None:
            default_schema = self.sessions.default_schema(context)
        rows = bound_rows(params)
        if rows is not None and not rows:
            return 0  # a batch of zero parameter rows runs nothing
        txn = ACTIVE.get()
        catalog = None
        if txn is not None and is_data_change(sql, txn, default_schema):
            catalog = self.transactions.transactions.catalog_for(txn)
        return self.writer.run(sql, default_schema, rows[0] if rows else None, principal,
                               lambda role: self.authorizer.authorize(context, role), context=context, param_rows=rows,
                               catalog=catalog)

    @contextlib.contextmanager
    def _reading_own_writes(self, handle: StatementHandle, principal: str | None) -> Iterator[None]:
        """A ticket reading a transaction's own writes runs against its staged snapshots while
        it is open (after COMMIT they are in the catalog; after ROLLBACK the ticket's snapshot
        is gone, which the engine reports)."""
        registry = self.transactions.transactions
        txn = registry.find_open(handle.transaction_id, principal) if handle.transaction_id else None
        if txn is None:
            yield
            return
        token = ACTIVE.set(txn)
        try:
            yield
        finally:
            ACTIVE.reset(token)

    def update(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        principal = self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["statement-update"])
        if CONTROL.match(sql):
            self.transactions.control(context, sql)
            return 0
        call = recognised(sql, params)
        if call is not None and call.writes:
            return calls.rows_of(self.calls.run(context, call, sql, principal))
        if call is not None or self.engine.classify(sql) == Kind.QUERY:
            raise errors.InvalidArgument("this statement is a query; execute it with GetFlightInfo/DoGet")
        return self._write(context, sql, default_schema, params)

    def create_prepared(self, context: flight.ServerCallContext, req: p.ActionCreatePreparedStatementRequest) -> bytes:
        self.authorizer.authorize(context, roles.action_role("CreatePreparedStatement"))
        if req.transaction_id:
            # Checked now (signed, this caller's, open) and carried in the handle for its runs.
            self.transactions.transactions.get(req.transaction_id, self.authorizer.principal_name(context))
        default_schema = self.sessions.default_schema(context)
        if CONTROL.match(req.query):
            # BEGIN / COMMIT / ROLLBACK: an update with no parameters (run by its DoPut).
            return p.ActionCreatePreparedStatementResult(
                self.handles.prepared(PreparedHandle(req.query, default_schema, is_query=False)), b"", b"",
                is_update=True,
            ).pack()
        call = calls.recognise(req.query, bound=False)
        if call is not None:
            # Queries both: a commit / abort answers its one row (runs at GetFlightInfo, or as an
            # update with DoPut); a change scan's schema is known once it runs (the table's
            # at the range's end), so it is left out here.
            handle = PreparedHandle(req.query, default_schema, is_query=True)
            params = calls.parameter_schema(call)
            return p.ActionCreatePreparedStatementResult(
                self.handles.prepared(handle), _ipc(call.result_schema) if call.writes else b"",
                _ipc(params) if len(params) else b"", is_update=False,
            ).pack()
        kind = self.engine.classify(req.query)
        if kind == Kind.WRITE:
            # No dataset schema: that is how JDBC knows it is an update. Each parameter is typed
            # by the column or expression it fills (sqlwrite.params), so JDBC's setInt binds.
            handle = PreparedHandle(req.query, default_schema, is_query=False,
                                    transaction_id=req.transaction_id or None)
            params = write_parameter_schema(req.query, default_schema, self.catalog)
            result = p.ActionCreatePreparedStatementResult(
                self.handles.prepared(handle), b"", _ipc(params) if len(params) else b"", is_update=True
            )
        else:
            sql, pins = self.engine.plan(req.query, default_schema, context)
            schema, params = self.engine.describe(sql, pins, default_schema)
            params = client_parameter_schema(params)
            schema = md.annotate(schema, self.engine.column_origins(sql, pins, default_schema))
            handle = PreparedHandle(req.query, default_schema, is_query=True,
                                    transaction_id=req.transaction_id or None)
            result = p.ActionCreatePreparedStatementResult(
                self.handles.prepared(handle), _ipc(schema), _ipc(params), is_update=False
            )
        return result.pack()

    def do_get(self, context: flight.ServerCallContext, sealed: bytes, principal: str | None,
               started: float) -> flight.FlightDataStream:
        """Run the query a sealed statement ticket holds; its stream is logged when it ends."""
        return self.runner.do_get(context, sealed, principal, started)

    def bind_parameters(self, context: flight.ServerCallContext, cmd: p.CommandPreparedStatementQuery,
                        reader: flight.MetadataRecordBatchReader) -> bytes:
        """DoPut of a prepared query's parameters: a new handle that carries them."""
        self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["prepared-query-parameters"])
        prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
        prepared.params = read_parameters(reader)
        check_parameter_count(prepared.sql, prepared.params)
        return p.DoPutPreparedStatementResult(prepared_statement_handle=self.handles.prepared(prepared)).encode()

    def close_prepared(self, context: flight.ServerCallContext, req: p.ActionClosePreparedStatementRequest) -> None:
        self.authorizer.authorize(context, roles.action_role("ClosePreparedStatement"))
        self.handles.open_prepared(req.prepared_statement_handle)  # validate; nothing to free


def recognised(sql: str, params: pa.RecordBatch | None) -> calls.IcefloeCall | None:
    """``sql`` as an icefloe statement with its one bound parameter row (it runs once), or None."""
    if calls.recognise(sql, bound=False) is None:
        return None
    rows = bound_rows(params)
    if rows is not None and len(rows) != 1:
        raise errors.InvalidArgument(f"{len(rows)} parameter rows are bound; an icefloe statement takes one")
    return calls.recognise(sql, rows[0] if rows else None)


def check_parameter_count(sql: str, params: pa.RecordBatch | None) -> None:
    """Bound values must match the statement's parameters one for one (DuckDB would otherwise
    fail only once the result streams, or bind NULL)."""
    if params is None or params.num_columns == 0:
        return
    expected = parameter_markers(sql)
    if params.num_columns != expected:
        raise errors.InvalidArgument(
            f"the statement has {expected} parameter(s) but {params.num_columns} value(s) per row were bound"
        )


def _ipc(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize().to_pybytes())
