"""Flight SQL service: decodes each command once and hands it to the handler for its family.

Families: statements (queries, updates, prepared statements), metadata (catalogs, schemas,
tables, types, keys, SqlInfo), ingest (handed to the append service) and sessions.
Unknown or malformed commands are INVALID_ARGUMENT; known ones icefloe does not support
(Substrait, savepoints, CancelQuery) are UNIMPLEMENTED. Transactions (``BeginTransaction`` /
``EndTransaction``, a command's ``transaction_id``, SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``)
go to ``flight_server.transactions``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors, roles
from flight_server.changes import PURPOSE as CHANGES_PURPOSE
from flight_server.changes import ChangeRequest, ChangeScanService
from flight_server.engine import CATALOG_NAME, Engine, Kind, split_namespace
from flight_server.engine.iceberg_source import empty_table
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
from flight_server.transactions import ACTIVE as _ACTIVE
from flight_server.transactions import Transaction, TransactionManager

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

logger = logging.getLogger("icefloe.flightsql")

_UNSUPPORTED_COMMANDS = (p.CommandStatementSubstraitPlan,)
_UNSUPPORTED_ACTIONS = {
    "CreatePreparedSubstraitPlan": "Substrait plans are not supported",
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
    ("BeginTransaction", "Begin a transaction: writes to any tables land together at EndTransaction COMMIT"),
    ("EndTransaction", "Commit (one catalog batch for every table written) or roll back a transaction"),
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
# SQL transaction control; the driver APIs (BeginTransaction / EndTransaction) do the same.
ADBC_USER_AGENT = "ADBC Flight SQL Driver"
_CONTROL = re.compile(
    r"^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT)(\s+(TRANSACTION|WORK))?\s*;?\s*$", re.IGNORECASE
)


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
        self.transactions = TransactionManager(server.catalog, server.handle_signer,
                                               getattr(config, "transaction_timeout_s", 300.0))
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
        if isinstance(cmd, (p.CommandStatementQuery, p.CommandPreparedStatementQuery)):
            if isinstance(cmd, p.CommandStatementQuery):
                sql, default_schema, params, txn_id = cmd.query, None, None, cmd.transaction_id
            else:
                prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
                sql, default_schema, params = prepared.sql, prepared.default_schema, prepared.params
                txn_id = prepared.transaction_id
            with self._in_transaction(context, txn_id, sql):
                return self._statement_info(context, descriptor, sql, default_schema, params)
        schema = self._metadata_schema(context, cmd)
        ticket = p.TicketStatementQuery(self.handles.metadata(descriptor.command)).pack()
        # Several endpoints are disjoint parts of one scan, in no particular order.
        return flight.FlightInfo(schema, descriptor, [self._endpoint(ticket)], -1, -1, ordered=False)

    def _statement_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, sql: str,
        default_schema: tuple[str, ...] | None, params: pa.RecordBatch | None,
    ) -> flight.FlightInfo:
        total_records = -1
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
        if _CONTROL.match(sql):
            self._control(context, sql)
            handle = StatementHandle("SELECT CAST(0 AS BIGINT) AS count", default_schema, [], None)
            handle.written = 0
            return handle
        if self.engine.classify(sql) == Kind.WRITE:
            count = self._write(context, sql, default_schema, params)
            handle = StatementHandle(f"SELECT CAST({count} AS BIGINT) AS count", default_schema, [], None)
            handle.written = count
            return handle
        sql, pins = self.engine.plan(sql, default_schema, context)
        txn = _ACTIVE.get()
        if txn is not None:
            pins = self.transactions.pin(txn, pins)
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
        txn = _ACTIVE.get()
        catalog = None
        if txn is not None and _is_data_change(sql, txn, default_schema):
            catalog = self.transactions.catalog_for(txn)
        return self.writer.run(sql, default_schema, rows[0] if rows else None, principal,
                               lambda role: self.server.authorize(context, role), context=context, param_rows=rows,
                               catalog=catalog)

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
        return empty_table(schema)

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
            with self._in_transaction(context, cmd.transaction_id, cmd.query):
                count = self._update(context, cmd.query, None, None)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandPreparedStatementUpdate):
            prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
            params = read_parameters(reader)
            if params is None:
                params = prepared.params
            with self._in_transaction(context, prepared.transaction_id, prepared.sql):
                count = self._update(context, prepared.sql, prepared.default_schema, params)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandStatementIngest):
            tid = cmd.transaction_id or self._adbc_ingest_transaction(context)
            with self._in_transaction(context, tid, None):
                count = self._ingest(context, cmd, reader, implicit=not cmd.transaction_id)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        else:
            raise errors.InvalidArgument(f"{type(cmd).__name__} is not valid for DoPut")

    def _update(
        self, context: flight.ServerCallContext, sql: str, default_schema: tuple[str, ...] | None,
        params: pa.RecordBatch | None,
    ) -> int:
        principal = self.server.authorize(context, roles.FLIGHT_COMMANDS["statement-update"])
        if _CONTROL.match(sql):
            self._control(context, sql)
            return 0
        call = _recognised(sql, params)
        if call is not None and call.writes:
            return calls.rows_of(self.calls.run(context, call, sql, principal))
        if call is not None or self.engine.classify(sql) == Kind.QUERY:
            raise errors.InvalidArgument("this statement is a query; execute it with GetFlightInfo/DoGet")
        return self._write(context, sql, default_schema, params)

    def _ingest(self, context: flight.ServerCallContext, cmd: p.CommandStatementIngest, reader: Any,
                implicit: bool = False) -> int:
        txn = _ACTIVE.get()
        if txn is not None:
            staged = transactional_ingest(self.server, context, cmd, self.default_schema(context), reader,
                                          self.transactions.catalog_for(txn), implicit)
            if staged is not None:
                return staged
        return ingest(self.server, context, cmd, self.default_schema(context), reader)

    def _adbc_ingest_transaction(self, context: flight.ServerCallContext) -> bytes | None:
        """The transaction an ADBC connection's ingest belongs to.

        The ADBC Flight SQL driver (Go, 1.13) begins a transaction when autocommit is off and
        sends its id with statements, but not with ``adbc_ingest``: without this, an ingest
        would land at once and a rollback would keep it. Its calls come over the connection's
        own gRPC channel, so the transaction that channel (peer address) began, for the same
        user, is the one it means. Only for that driver (by its user agent): other clients
        send the id they mean.
        """
        agents = call_headers(context, "user-agent")
        if not agents or not agents[-1].startswith(ADBC_USER_AGENT):
            return None
        return self.transactions.by_peer(context.peer(), self.server.principal_name(context))

    # -- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _in_transaction(self, context: flight.ServerCallContext, sealed: bytes | None,
                        sql: str | None) -> Iterator[Transaction | None]:
        """Run the block inside the transaction ``sealed`` names, else the session's (SQL BEGIN),
        else none. Transaction control statements run outside (they begin / end it)."""
        if sql is not None and _CONTROL.match(sql):
            if sealed:
                raise errors.FailedPrecondition(
                    "this statement controls transactions, but it was sent inside one the driver manages; "
                    "use the driver's commit() / rollback() (EndTransaction)"
                )
            yield None
            return
        if not sealed:
            session = self.sessions.get(context)
            sealed = session.transaction if session is not None else None
        if not sealed:
            yield None
            return
        principal = self.server.principal_name(context)
        with self.transactions.using(sealed, principal) as txn:
            token = _ACTIVE.set(txn)
            try:
                yield txn
            finally:
                _ACTIVE.reset(token)

    def _control(self, context: flight.ServerCallContext, sql: str) -> None:
        """SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``: a transaction of the caller's session."""
        verb = sql.strip().split()[0].rstrip(";").upper()
        principal = self.server.principal_name(context)
        session = self.sessions.get(context, create=True)
        if verb in ("BEGIN", "START"):
            self.server.authorize(context, roles.action_role("BeginTransaction"))
            if session is None:
                raise errors.FailedPrecondition(
                    "BEGIN needs a session (a bearer token or the session cookie) to keep the transaction in; "
                    "use the driver's transaction API (autocommit off) instead"
                )
            if session.transaction is not None:
                with contextlib.suppress(errors.IcefloeError):
                    self.transactions.get(session.transaction, principal)
                    raise errors.FailedPrecondition("a transaction is already open in this session; "
                                                    "COMMIT or ROLLBACK it first")
            session.transaction = self.transactions.begin(principal)  # (no peer: bound to the session)
            return
        self.server.authorize(context, roles.action_role("EndTransaction"))
        sealed = session.transaction if session is not None else None
        if sealed is None:
            return  # as in PostgreSQL: COMMIT / ROLLBACK outside a transaction changes nothing
        assert session is not None
        session.transaction = None
        if verb in ("COMMIT", "END"):
            self.transactions.commit(sealed, principal)
        else:
            self.transactions.rollback(sealed, principal)

    def _begin_transaction(self, context: flight.ServerCallContext) -> bytes:
        principal = self.server.authorize(context, roles.action_role("BeginTransaction"))
        sealed = self.transactions.begin(principal, peer=context.peer())
        return p.ActionBeginTransactionResult(transaction_id=sealed).pack()

    def _end_transaction(self, context: flight.ServerCallContext, req: p.ActionEndTransactionRequest) -> None:
        principal = self.server.authorize(context, roles.action_role("EndTransaction"))
        if not req.transaction_id:
            raise errors.InvalidArgument("EndTransaction needs a transaction_id")
        if req.action == p.END_TRANSACTION_COMMIT:
            self.transactions.commit(req.transaction_id, principal)
        elif req.action == p.END_TRANSACTION_ROLLBACK:
            self.transactions.rollback(req.transaction_id, principal)
        else:
            raise errors.InvalidArgument("EndTransaction action must be END_TRANSACTION_COMMIT or _ROLLBACK")

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
            if kind == "BeginTransaction":
                p.ActionBeginTransactionRequest.unpack(body)
                return iter([self._begin_transaction(context)])
            if kind == "EndTransaction":
                self._end_transaction(context, p.ActionEndTransactionRequest.unpack(body))
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
            # Checked now (signed, this caller's, open) and carried in the handle for its runs.
            self.transactions.get(req.transaction_id, self.server.principal_name(context))
        default_schema = self.default_schema(context)
        if _CONTROL.match(req.query):
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
            params = write_parameter_schema(req.query, default_schema, self.server.catalog)
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


def _is_data_change(sql: str, txn: Transaction, default_schema: tuple[str, ...] | None) -> bool:
    """True for a data change (staged in the transaction); False for DDL, which is not part of
    a transaction: it lands at once, as with autocommit (SqlInfo says DDL neither commits the
    transaction nor is ignored). ADBC connections are in a transaction whenever autocommit is
    off, so refusing DDL there would refuse it to every default DB-API connection. DDL on a
    table the transaction wrote is refused: it would change what the staged writes are based on.
    """
    from sqlglot import exp

    from flight_server.sqlwrite.parse import parse, table_name

    tree = parse(sql)
    if isinstance(tree, (exp.Insert, exp.Delete, exp.Update, exp.TruncateTable)):
        return True
    nodes = list(tree.args.get("tables") or []) + [tree.this]
    for node in nodes:
        node = node.this if isinstance(node, exp.Schema) else node
        if not isinstance(node, exp.Table):
            continue
        try:
            target = tuple(table_name(node, default_schema).identifier)
        except errors.IcefloeError:
            continue  # the DDL handler names the bad name itself
        if target in txn.tables:
            raise errors.FailedPrecondition(
                f"table {'.'.join(target)} has uncommitted writes in this transaction; COMMIT or ROLLBACK "
                "before changing or dropping it"
            )
    return False


def transactional_ingest(server: IcefloeServer, context: flight.ServerCallContext, cmd: p.CommandStatementIngest,
                         namespace: tuple[str, ...], reader: Any, catalog: Any, implicit: bool) -> int | None:
    """``adbc_ingest`` inside a transaction: the rows are staged in it (appends to existing
    tables). An ingest that creates or replaces a table is DDL: refused when the client named
    the transaction, run at once (None: not handled here) when it was the driver's implicit one
    (as DDL statements are, see ``_is_data_change``)."""
    from catalog.context import commit_context
    from flight_server.flightsql.ingest import ingest_mode
    from flight_server.sqlwrite.commit import commit_once
    from flight_server.sqlwrite.rows import conform

    server.authorize(context, roles.FLIGHT_COMMANDS["statement-ingest"])
    opts = cmd.table_definition_options or p.TableDefinitionOptions()
    mode = ingest_mode(opts.if_not_exist, opts.if_exists)
    ns = split_namespace(cmd.schema) if cmd.schema else namespace
    identifier = (*ns, cmd.table)
    exists = server.catalog.table_exists(identifier)
    if mode not in ("append", "create_append") or not exists or cmd.temporary:
        if implicit:
            return None
        raise errors.FailedPrecondition(
            "inside a transaction, ingest appends to an existing table (mode append); creating or replacing "
            "tables is DDL and not part of a transaction"
        )
    table = catalog.load_table(identifier)
    data = pa.Table.from_batches(list(server.appends._batches(reader, context)), schema=reader.schema)
    what = f"ingest into {'.'.join(identifier)}"
    names = [f.name for f in table.schema().fields]
    missing = [n for n in names if n not in data.column_names]
    if missing or len(data.column_names) != len(names):
        raise errors.InvalidArgument(f"{what}: the stream's columns {data.column_names} do not match {names}")
    rows = conform(data.select(names), table.schema(), names, what)
    if rows.num_rows == 0:
        return 0
    with commit_context(extra={"sql": f"-- {what}"}):
        txn = table.transaction()
        txn.append(rows)
        commit_once(txn)
    return int(rows.num_rows)
