"""Flight SQL service: decodes each command once and hands it to the handler for its family.

Families: statements (queries, updates, prepared statements), metadata (catalogs, schemas,
tables, types, keys, SqlInfo), ingest (handed to the append service) and sessions.
Unknown or malformed commands are INVALID_ARGUMENT; known ones icefloe does not support
(Substrait, transactions, savepoints, CancelQuery) are UNIMPLEMENTED.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors, roles
from flight_server.changes import PURPOSE as CHANGES_PURPOSE
from flight_server.changes import ChangeRequest, ChangeScanService
from flight_server.engine import CATALOG_NAME, Engine, Kind, split_namespace
from flight_server.engine.splits import DEFAULT_MAX_PARTITIONS, DEFAULT_TARGET_BYTES
from flight_server.engine.sql_text import DEFAULT_SCHEMA, parameter_markers
from flight_server.flightsql import calls
from flight_server.flightsql import metadata as md
from flight_server.flightsql import protocol as p
from flight_server.flightsql.ingest import ingest
from flight_server.flightsql.sessions import SessionStore
from flight_server.flightsql.statements import (
    MAX_HANDLE_BYTES,
    HandleCodec,
    PreparedHandle,
    StatementHandle,
    bound_rows,
    param_rows,
    read_parameters,
)
from flight_server.headers import call_headers
from flight_server.sqlwrite import SqlWriter
from flight_server.sqlwrite.params import client_parameter_schema, write_parameter_schema

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

logger = logging.getLogger("icefloe.flightsql")

_UNSUPPORTED_COMMANDS = (p.CommandStatementSubstraitPlan,)
_UNSUPPORTED_ACTIONS = {
    "CreatePreparedSubstraitPlan": "Substrait plans are not supported",
    "BeginTransaction": "transactions are not supported (every statement commits on its own)",
    "EndTransaction": "transactions are not supported (every statement commits on its own)",
    "BeginSavepoint": "savepoints are not supported",
    "EndSavepoint": "savepoints are not supported",
    "CancelQuery": "CancelQuery is not supported; cancel the DoGet call instead",
    "CancelFlightInfo": "CancelFlightInfo is not supported; cancel the DoGet call instead",
    "RenewFlightEndpoint": "endpoints do not expire; there is nothing to renew",
}
_ACTIONS = [
    ("CreatePreparedStatement", "Create a prepared statement (stateless handle)"),
    ("ClosePreparedStatement", "Close a prepared statement (nothing to free: handles are stateless)"),
    ("SetSessionOptions", "Set session options: catalog, schema"),
    ("GetSessionOptions", "Get session options"),
    ("CloseSession", "Close the session"),
]
# Split scans (see engine.splits): a session option or a call header of the same name.
SCAN_TARGET_BYTES = "icefloe.scan.target-partition-bytes"
SCAN_MAX_PARTITIONS = "icefloe.scan.max-partitions"
SESSION_OPTIONS = ("catalog", "schema", SCAN_TARGET_BYTES, SCAN_MAX_PARTITIONS)
T = TypeVar("T")
# Set on an exception already written to the query log (a write that failed inside planning).
_LOGGED = "_icefloe_querylogged"
# What a write statement sent as a query returns: the number of rows it affected.
WRITE_RESULT_SCHEMA = pa.schema([pa.field("count", pa.int64())])


def _ipc(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize().to_pybytes())


class FlightSqlService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server
        config = server.config
        self.engine = Engine(
            server.catalog,
            query_timeout_s=config.query_timeout_s,
            max_concurrent=config.max_concurrent_queries,
            stopping=server.stopping,
            memory_limit=config.memory_limit,
        )
        self.metadata = md.Metadata(server.catalog)
        # Tickets and prepared-statement handles go out sealed and come back verified.
        self.handles = HandleCodec(server.handle_signer)
        # Endpoints name the fleet that can run them (any server on the warehouse), or no one:
        # the spec's "this same server".
        self._locations = [flight.Location(uri) for uri in config.advertise_uris]
        self.changes = ChangeScanService(server.catalog, server.handle_signer)
        # icefloe's own SQL statements (change scans, staged-append commits) for SQL-only clients.
        self.calls = calls.IcefloeCalls(self.changes, lambda: server.staged, server.handle_signer, server.querylog,
                                        server.catalog.table_exists)
        self.sessions = SessionStore()
        self.writer = SqlWriter(self.engine, server.catalog,
                                lambda: getattr(getattr(server, "appends", None), "appender", None),
                                lambda: getattr(server, "lineage", None))

    def close(self) -> None:
        self.engine.close()

    # -- decoding ------------------------------------------------------------------------

    @staticmethod
    def _command(data: bytes) -> p.Message:
        if not data:
            raise errors.InvalidArgument("empty Flight SQL command")
        if len(data) > MAX_HANDLE_BYTES:
            raise errors.InvalidArgument("Flight SQL command too large")
        try:
            cmd = p.decode_command(data)
        except p.ProtocolError as exc:
            raise errors.InvalidArgument(f"malformed Flight SQL command: {exc}") from None
        if isinstance(cmd, _UNSUPPORTED_COMMANDS):
            raise errors.Unimplemented(f"{type(cmd).__name__} is not supported")
        if getattr(cmd, "transaction_id", None):
            raise errors.Unimplemented("transactions are not supported (every statement commits on its own)")
        return cmd

    def _descriptor_command(self, descriptor: flight.FlightDescriptor) -> p.Message:
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise errors.InvalidArgument("expected a command descriptor (Flight SQL)")
        return self._command(descriptor.command)

    def default_schema(self, context: flight.ServerCallContext) -> tuple[str, ...]:
        """The session's current schema: unqualified reads, writes and ingest resolve there.

        Every session has one: the ``schema`` option it set, else ``default`` (which the server
        creates at start and refuses to drop).
        """
        session = self.sessions.get(context)
        if session is None or not session.options.get("schema"):
            return split_namespace(DEFAULT_SCHEMA)
        return split_namespace(str(session.options["schema"]))

    # -- GetFlightInfo / GetSchema ---------------------------------------------------------

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        if descriptor.descriptor_type == flight.DescriptorType.CMD and descriptor.command[:1] == b"{":
            # icefloe's own JSON commands (Flight SQL commands are Any-packed protobuf)
            self.server.authorize(context, roles.FLIGHT_COMMANDS["change-scan"])
            target, most = self._scan_options(context)
            return self.changes.flight_info(descriptor, ChangeRequest.parse(descriptor.command), target, most,
                                            self._locations)
        cmd = self._descriptor_command(descriptor)
        total_records = -1
        if isinstance(cmd, (p.CommandStatementQuery, p.CommandPreparedStatementQuery)):
            if isinstance(cmd, p.CommandStatementQuery):
                sql, default_schema, params = cmd.query, None, None
            else:
                prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
                sql, default_schema, params = prepared.sql, prepared.default_schema, prepared.params
            call = _recognised(sql, params)
            if call is not None:
                principal = self.server.authorize(context, roles.SQL_STATEMENTS[f"icefloe.{call.function}"])
                target, most = self._scan_options(context)
                return self.calls.flight_info(context, descriptor, call, sql, principal, target, most,
                                              self._locations)
            handle = self._logged_plan(context, sql, default_schema, params)
            if handle.written is not None:
                # A write sent as a query ran here, at GetFlightInfo; the result is its row count.
                total_records = handle.written
            rows = param_rows(handle.params)
            schema, _ = self.engine.describe(handle.sql, handle.pins, handle.default_schema, rows[0] if rows else None)
            schema = self._annotated(schema, handle)
            endpoints = [self._endpoint(p.TicketStatementQuery(self.handles.statement(h)).pack())
                         for h in self._endpoints(context, handle)]
        else:
            schema = self._metadata_schema(context, cmd)
            ticket = p.TicketStatementQuery(self.handles.metadata(descriptor.command)).pack()
            endpoints = [self._endpoint(ticket)]
        # Several endpoints are disjoint parts of one scan, in no particular order.
        return flight.FlightInfo(schema, descriptor, endpoints, total_records, -1, ordered=False)

    def _endpoint(self, ticket: bytes) -> flight.FlightEndpoint:
        return flight.FlightEndpoint(ticket, self._locations)

    def _endpoints(self, context: flight.ServerCallContext, handle: StatementHandle) -> list[StatementHandle]:
        """One handle per endpoint: a row-wise scan of one table is split by data files."""
        if handle.written is not None or handle.params is not None:
            return [handle]
        target, most = self._scan_options(context)
        groups = self.engine.split(handle.sql, handle.pins, handle.default_schema, target, most)
        return [StatementHandle(handle.sql, handle.default_schema, pins, None) for pins in groups]

    def _scan_options(self, context: flight.ServerCallContext) -> tuple[int, int]:
        """(target bytes per endpoint, most endpoints): a call header wins over the session
        option of the same name, which wins over the default."""
        session = self.sessions.get(context)
        options = session.options if session is not None else {}

        def pick(key: str, default: int) -> int:
            values = call_headers(context, key)
            raw = values[-1] if values else options.get(key)
            if raw is None:
                return default
            value = _positive_int(raw)
            if value is None:
                raise errors.InvalidArgument(f"{key} must be a whole number >= 1, got {str(raw)[:40]!r}")
            return value

        return pick(SCAN_TARGET_BYTES, DEFAULT_TARGET_BYTES), pick(SCAN_MAX_PARTITIONS, DEFAULT_MAX_PARTITIONS)

    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        cmd = self._descriptor_command(descriptor)
        if isinstance(cmd, (p.CommandStatementQuery, p.CommandPreparedStatementQuery)):
            sql = (cmd.query if isinstance(cmd, p.CommandStatementQuery)
                   else self.handles.open_prepared(cmd.prepared_statement_handle).sql)
            self.server.authorize(context, roles.FLIGHT_COMMANDS["statement-query"])
            call = calls.recognise(sql, bound=False)
            if call is not None and call.writes:
                return flight.SchemaResult(call.result_schema)  # asking must not commit
            if call is None and self.engine.classify(sql) == Kind.WRITE:
                # Asking for the schema must not run the write: its result is one count row.
                return flight.SchemaResult(WRITE_RESULT_SCHEMA)
            return flight.SchemaResult(self.get_flight_info(context, descriptor).schema)
        return flight.SchemaResult(self._metadata_schema(context, cmd))

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
        self.server.authorize(context, roles.SQL_STATEMENTS["query"])
        if default_schema is None:
            default_schema = self.default_schema(context)
        if self.engine.classify(sql) == Kind.WRITE:
            count = self._write(context, sql, default_schema, params)
            handle = StatementHandle(f"SELECT CAST({count} AS BIGINT) AS count", default_schema, [], None)
            handle.written = count
            return handle
        sql, pins = self.engine.plan(sql, default_schema, context)
        return StatementHandle(sql, default_schema, pins, params)

    def _logged_plan(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> StatementHandle:
        """``_plan``, with a query refused at planning in the query log (writes log themselves;
        a query that plans is logged when its DoGet stream ends)."""
        return self._refusals_logged(context, sql, lambda: self._plan(context, sql, default_schema, params))

    def _refusals_logged(self, context: flight.ServerCallContext, sql: str, step: Callable[[], T]) -> T:
        """Run ``step`` for statement ``sql``; if it fails, the statement goes to the query log."""
        started = time.perf_counter()
        try:
            return step()
        except Exception as exc:
            if not getattr(exc, _LOGGED, False):
                self.server.querylog.record(sql, self.server.principal_name(context), started, errors.status_of(exc))
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
            self.server.querylog.record(sql, self.server.principal_name(context), started, errors.status_of(exc))
            with contextlib.suppress(AttributeError, TypeError):  # a few built-in exceptions take no attributes
                setattr(exc, _LOGGED, True)
            raise
        self.server.querylog.record(sql, self.server.principal_name(context), started, "OK", rows=count)
        return count

    def _run_write(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        # DML or DDL (both write); the SQL writer asks more where a statement needs it
        principal = self.server.authorize(context, roles.SQL_STATEMENTS["dml"])
        if default_schema is None:
            default_schema = self.default_schema(context)
        rows = bound_rows(params)
        if rows is not None and not rows:
            return 0  # a batch of zero parameter rows runs nothing
        return self.writer.run(sql, default_schema, rows[0] if rows else None, principal,
                               lambda role: self.server.authorize(context, role), context=context, param_rows=rows)

    def _metadata_schema(self, context: flight.ServerCallContext, cmd: p.Message) -> pa.Schema:
        self.server.authorize(context, roles.FLIGHT_COMMANDS["metadata"])
        if isinstance(cmd, p.CommandGetTables):
            return md.TABLES_SCHEMA_WITH_SCHEMA if cmd.include_schema else md.TABLES_SCHEMA
        schema = {
            p.CommandGetSqlInfo: md.SQL_INFO_SCHEMA,
            p.CommandGetXdbcTypeInfo: md.XDBC_TYPE_INFO_SCHEMA,
            p.CommandGetCatalogs: md.CATALOGS_SCHEMA,
            p.CommandGetDbSchemas: md.DB_SCHEMAS_SCHEMA,
            p.CommandGetTableTypes: md.TABLE_TYPES_SCHEMA,
            p.CommandGetPrimaryKeys: md.PRIMARY_KEYS_SCHEMA,
            p.CommandGetExportedKeys: md.FOREIGN_KEYS_SCHEMA,
            p.CommandGetImportedKeys: md.FOREIGN_KEYS_SCHEMA,
            p.CommandGetCrossReference: md.FOREIGN_KEYS_SCHEMA,
        }.get(type(cmd))
        if schema is None:
            raise errors.InvalidArgument(f"{type(cmd).__name__} is not valid for GetFlightInfo")
        return schema

    # -- DoGet -------------------------------------------------------------------------------

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        """Run a ticket GetFlightInfo issued: only sealed tickets, checked again before they run."""
        cmd = self._command(ticket.ticket)
        if not isinstance(cmd, p.TicketStatementQuery):
            raise errors.InvalidArgument("DoGet takes a ticket from GetFlightInfo, not a command")
        principal = self.server.authorize(context, roles.FLIGHT_COMMANDS["ticket"])
        started = time.perf_counter()
        sealed = cmd.statement_handle
        if sealed.startswith(f"icefloe.{CHANGES_PURPOSE}.".encode()):
            return self.changes.do_get(sealed)
        if calls.answers(sealed):
            return self.calls.do_get(sealed)
        if sealed.startswith(b"icefloe." + HandleCodec.METADATA.encode()):
            inner = self._command(self.handles.open_metadata(sealed))
            self._metadata_schema(context, inner)  # what GetFlightInfo accepts, nothing else
            return flight.RecordBatchStream(self._metadata_table(context, inner))
        handle = self.handles.open_statement(sealed)
        # Defence in depth: a sealed ticket only ever holds a query GetFlightInfo planned, but
        # what runs here is classified (and sandbox-checked by the engine) again anyway.
        if self.engine.classify(handle.sql) != Kind.QUERY:
            raise errors.InvalidArgument("this ticket does not hold a query")
        rows = param_rows(handle.params)
        try:
            reader = self.engine.execute(
                handle.sql, handle.pins, handle.default_schema, rows[0] if rows else None, context=context
            )
        except Exception as exc:
            self.server.querylog.record(handle.sql, principal, started, errors.status_of(exc))
            raise
        if rows is not None and len(rows) > 1:
            reader = self._each_row(reader, handle, rows, context)
        annotated = self._annotated(reader.schema, handle)
        if not annotated.equals(reader.schema, check_metadata=True):
            reader = reader.cast(annotated)  # in C++, per batch: metadata and NOT NULL flags only
        if handle.readback:
            return flight.RecordBatchStream(reader)  # a write's count: the write is logged already
        # Counted per batch (rows, bytes) and logged once the stream ends.
        return flight.RecordBatchStream(self.server.querylog.streamed(reader, handle.sql, principal, started))

    def _each_row(
        self, first: pa.RecordBatchReader, handle: StatementHandle, rows: list[list[Any]],
        context: flight.ServerCallContext,
    ) -> pa.RecordBatchReader:
        """One stream of the query's results for every bound parameter row, in row order (each
        row's query runs when the previous one's results are sent, under the usual limits)."""
        schema = first.schema

        def batches() -> Iterator[pa.RecordBatch]:
            reader = first
            rest = iter(rows[1:])
            while True:
                try:
                    for batch in reader:
                        yield batch.cast(schema) if batch.schema != schema else batch
                finally:
                    reader.close()
                row = next(rest, None)
                if row is None:
                    return
                reader = self.engine.execute(handle.sql, handle.pins, handle.default_schema, row, context=context)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def _annotated(self, schema: pa.Schema, handle: StatementHandle) -> pa.Schema:
        """A result schema with the column metadata clients read (same at GetFlightInfo and DoGet)."""
        if handle.written is not None:
            return schema
        return md.annotate(schema, self.engine.column_origins(handle.sql, handle.pins, handle.default_schema))

    def _metadata_table(self, context: flight.ServerCallContext, cmd: p.Message) -> pa.Table:
        schema = self._metadata_schema(context, cmd)
        if isinstance(cmd, p.CommandGetSqlInfo):
            return md.sql_info_table(cmd)
        if isinstance(cmd, p.CommandGetXdbcTypeInfo):
            return self.metadata.xdbc_type_info(cmd)
        if isinstance(cmd, p.CommandGetCatalogs):
            return self.metadata.catalogs()
        if isinstance(cmd, p.CommandGetDbSchemas):
            return self.metadata.db_schemas(cmd)
        if isinstance(cmd, p.CommandGetTables):
            return self.metadata.tables(cmd)
        if isinstance(cmd, p.CommandGetTableTypes):
            return self.metadata.table_types()
        # Iceberg tables have no primary or foreign keys: empty results with the spec's schema.
        return schema.empty_table()

    # -- DoPut -------------------------------------------------------------------------------

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        cmd = self._descriptor_command(descriptor)
        if isinstance(cmd, p.CommandPreparedStatementQuery):
            self.server.authorize(context, roles.FLIGHT_COMMANDS["prepared-query-parameters"])
            prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
            prepared.params = read_parameters(reader)
            _check_parameter_count(prepared.sql, prepared.params)
            result = p.DoPutPreparedStatementResult(prepared_statement_handle=self.handles.prepared(prepared))
            writer.write(pa.py_buffer(result.encode()))
        elif isinstance(cmd, p.CommandStatementUpdate):
            if cmd.transaction_id:
                raise errors.Unimplemented("transactions are not supported")
            count = self._update(context, cmd.query, None, None)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandPreparedStatementUpdate):
            prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
            params = read_parameters(reader)
            if params is None:
                params = prepared.params
            count = self._update(context, prepared.sql, prepared.default_schema, params)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandStatementIngest):
            count = self._ingest(context, cmd, reader)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        else:
            raise errors.InvalidArgument(f"{type(cmd).__name__} is not valid for DoPut")

    def _update(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        principal = self.server.authorize(context, roles.FLIGHT_COMMANDS["statement-update"])
        call = _recognised(sql, params)
        if call is not None and call.writes:
            return calls.rows_of(self.calls.run(context, call, sql, principal))
        if call is not None or self.engine.classify(sql) == Kind.QUERY:
            raise errors.InvalidArgument("this statement is a query; execute it with GetFlightInfo/DoGet")
        return self._write(context, sql, default_schema, params)

    def _ingest(self, context: flight.ServerCallContext, cmd: p.CommandStatementIngest, reader: Any) -> int:
        return ingest(self.server, context, cmd, self.default_schema(context), reader)

    # -- DoAction ----------------------------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        kind = action.type
        body = action.body.to_pybytes() if action.body is not None else b""
        if kind in _UNSUPPORTED_ACTIONS:
            raise errors.Unimplemented(_UNSUPPORTED_ACTIONS[kind])
        try:
            if kind == "CreatePreparedStatement":
                prepare = p.ActionCreatePreparedStatementRequest.unpack(body)
                return iter([self._refusals_logged(context, prepare.query,
                                                   lambda: self._create_prepared(context, prepare))])
            if kind == "ClosePreparedStatement":
                self.server.authorize(context, roles.action_role("ClosePreparedStatement"))
                req = p.ActionClosePreparedStatementRequest.unpack(body)
                self.handles.open_prepared(req.prepared_statement_handle)  # validate; nothing to free
                return iter([])
            if kind == "SetSessionOptions":
                return iter([self._set_session_options(context, p.SetSessionOptionsRequest.decode(body))])
            if kind == "GetSessionOptions":
                p.GetSessionOptionsRequest.decode(body)
                return iter([self._get_session_options(context)])
            if kind == "CloseSession":
                p.CloseSessionRequest.decode(body)
                self.sessions.close(context)
                return iter([p.CloseSessionResult(status=1).encode()])
        except p.ProtocolError as exc:
            raise errors.InvalidArgument(f"malformed {kind} request: {exc}") from None
        raise errors.InvalidArgument(f"unknown action {kind!r}")

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return list(_ACTIONS)

    def _create_prepared(self, context: flight.ServerCallContext, req: p.ActionCreatePreparedStatementRequest) -> bytes:
        self.server.authorize(context, roles.action_role("CreatePreparedStatement"))
        if req.transaction_id:
            raise errors.Unimplemented("transactions are not supported")
        default_schema = self.default_schema(context)
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
            handle = PreparedHandle(req.query, default_schema, is_query=False)
            params = write_parameter_schema(req.query, default_schema, self.server.catalog)
            result = p.ActionCreatePreparedStatementResult(
                self.handles.prepared(handle), b"", _ipc(params) if len(params) else b"", is_update=True
            )
        else:
            sql, pins = self.engine.plan(req.query, default_schema, context)
            schema, params = self.engine.describe(sql, pins, default_schema)
            params = client_parameter_schema(params)
            schema = md.annotate(schema, self.engine.column_origins(sql, pins, default_schema))
            handle = PreparedHandle(req.query, default_schema, is_query=True)
            result = p.ActionCreatePreparedStatementResult(
                self.handles.prepared(handle), _ipc(schema), _ipc(params), is_update=False
            )
        return result.pack()

    def _set_session_options(self, context: flight.ServerCallContext, req: p.SetSessionOptionsRequest) -> bytes:
        self.server.authorize(context, roles.action_role("SetSessionOptions"))
        session = self.sessions.get(context, create=True)
        if session is None:  # the server was built without the session middleware
            raise errors.Unimplemented("session options are not available on this server")
        errs = []
        for entry in req.session_options:
            value = entry.value.python_value() if entry.value else None
            code = self._session_option_error(entry.key, value)
            if code:
                errs.append(p.SetSessionOptionsErrorEntry(entry.key, p.SetSessionOptionsError(code)))
            elif value is None:
                session.options.pop(entry.key, None)
            else:
                session.options[entry.key] = value
        return p.SetSessionOptionsResult(errors=errs).encode()

    def _session_option_error(self, key: str, value: Any) -> int:
        """0 when the option may be set, else the SetSessionOptionsResult ErrorValue."""
        if key not in SESSION_OPTIONS:
            return 1  # INVALID_NAME
        if value is None:
            return 0
        if key in (SCAN_TARGET_BYTES, SCAN_MAX_PARTITIONS):
            return 0 if _positive_int(value) is not None else 2  # INVALID_VALUE
        if not isinstance(value, str):
            return 2  # INVALID_VALUE
        if key == "catalog":
            return 0 if value == CATALOG_NAME else 2
        return 0 if self.server.catalog.namespace_exists(split_namespace(value)) else 2

    def _get_session_options(self, context: flight.ServerCallContext) -> bytes:
        self.server.authorize(context, roles.action_role("GetSessionOptions"))
        session = self.sessions.get(context)
        options: dict[str, Any] = {"catalog": CATALOG_NAME, "schema": DEFAULT_SCHEMA}
        if session is not None:
            options.update(session.options)
        entries = [
            p.SessionOptionEntry(k, p.SessionOptionValue(string_value=str(v))) for k, v in sorted(options.items())
        ]
        return p.GetSessionOptionsResult(entries).encode()


def _recognised(sql: str, params: pa.RecordBatch | None) -> calls.IcefloeCall | None:
    """``sql`` as an icefloe statement with its one bound parameter row (it runs once), or None."""
    if calls.recognise(sql, bound=False) is None:
        return None
    rows = bound_rows(params)
    if rows is not None and len(rows) != 1:
        raise errors.InvalidArgument(f"{len(rows)} parameter rows are bound; an icefloe statement takes one")
    return calls.recognise(sql, rows[0] if rows else None)


def _positive_int(raw: Any) -> int | None:
    """A whole number >= 1 from a session option or header value (int or decimal text)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and raw.strip().isdigit() and len(raw.strip()) <= 19:
        value = int(raw.strip())
    else:
        return None
    return value if value >= 1 else None


def _check_parameter_count(sql: str, params: pa.RecordBatch | None) -> None:
    """Bound values must match the statement's parameters one for one (DuckDB would otherwise
    fail only once the result streams, or bind NULL)."""
    if params is None or params.num_columns == 0:
        return
    expected = parameter_markers(sql)
    if params.num_columns != expected:
        raise errors.InvalidArgument(
            f"the statement has {expected} parameter(s) but {params.num_columns} value(s) per row were bound"
        )
