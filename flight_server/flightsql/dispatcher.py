"""Flight SQL service: decodes each command once and hands it to the handler for its family.

Families: statements (queries, updates, prepared statements), metadata (catalogs, schemas,
tables, types, keys, SqlInfo), ingest (handed to the append service) and sessions.
Unknown or malformed commands are INVALID_ARGUMENT; known ones icefloe does not support
(Substrait, savepoints, CancelQuery) are UNIMPLEMENTED. Transactions (``BeginTransaction`` /
``EndTransaction``, a command's ``transaction_id``, SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``)
go to ``flight_server.transactions``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from catalog import RocksCatalog
from catalog.lineage import LineageExporter
from flight_server import errors
from flight_server.appends import AppendService
from flight_server.changes import PURPOSE as CHANGES_PURPOSE
from flight_server.changes import ChangeRequest, ChangeScanService
from flight_server.config import Config
from flight_server.engine import Engine, Kind
from flight_server.flightsql import calls
from flight_server.flightsql import metadata as md
from flight_server.flightsql import protocol as p
from flight_server.flightsql.ingest import ingest
from flight_server.flightsql.metadata_handler import MetadataHandler
from flight_server.flightsql.session_handler import SessionHandler
from flight_server.flightsql.sessions import SessionStore
from flight_server.flightsql.statement_handler import WRITE_RESULT_SCHEMA, StatementHandler
from flight_server.flightsql.statements import MAX_HANDLE_BYTES, HandleCodec, read_parameters
from flight_server.flightsql.transaction_handler import TransactionHandler, transactional_ingest
from flight_server.message_size import bounded_stream
from flight_server.observability.querylog import QueryLog
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer
from flight_server.security.handles import HandleSigner
from flight_server.sqlwrite import SqlWriter
from flight_server.transactions import ACTIVE, TransactionManager

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


@dataclass(frozen=True)
class FlightSqlDeps:
    """What the Flight SQL service uses, built by the server (it never sees the server itself)."""

    config: Config
    catalog: RocksCatalog
    authorizer: Authorizer
    signer: HandleSigner  # seals tickets and handles: any server on the warehouse can open them
    querylog: QueryLog
    stopping: threading.Event
    appends: AppendService  # ingest, and the appender SQL INSERTs commit through
    lineage: LineageExporter
    # The read worker the next plain read's endpoint names (flight_server.workers), or None:
    # no worker is up, the endpoint names the fleet (--advertise-uri) or this server.
    read_worker: Callable[[], flight.Location | None] = lambda: None


class FlightSqlService:
    """Decodes each Flight SQL command once and hands it to the handler of its family."""

    def __init__(self, deps: FlightSqlDeps) -> None:
        config = deps.config
        self.authorizer = deps.authorizer
        self.appends = deps.appends
        self.engine = Engine.for_config(deps.catalog, config, deps.stopping)
        # Tickets and prepared-statement handles go out sealed and come back verified.
        self.handles = HandleCodec(deps.signer)
        # Endpoints name the fleet that can run them (any server on the warehouse), or no one:
        # the spec's "this same server".
        self._locations = [flight.Location(uri) for uri in config.advertise_uris]
        self.changes = ChangeScanService(deps.catalog, deps.signer)
        # icefloe's own SQL statements (change scans, staged-append commits) for SQL-only clients.
        self.calls = calls.IcefloeCalls(self.changes, lambda: deps.appends.staged, deps.signer, deps.querylog,
                                        deps.catalog.table_exists)
        self.sessions = SessionHandler(SessionStore(), deps.authorizer, deps.catalog.namespace_exists)
        self.transactions = TransactionHandler(
            TransactionManager(deps.catalog, deps.signer, getattr(config, "transaction_timeout_s", 300.0)),
            self.sessions.sessions, deps.authorizer)
        writer = SqlWriter(self.engine, deps.catalog, lambda: deps.appends.appender, lambda: deps.lineage)
        self.metadata = MetadataHandler(md.Metadata(deps.catalog), deps.authorizer)
        self.statements = StatementHandler(self.engine, self.handles, self.calls, self.sessions, self.transactions,
                                           writer, deps.querylog, deps.authorizer, deps.catalog, self._locations,
                                           deps.read_worker)

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

    # -- GetFlightInfo / GetSchema ---------------------------------------------------------

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        if descriptor.descriptor_type == flight.DescriptorType.CMD and descriptor.command[:1] == b"{":
            # icefloe's own JSON commands (Flight SQL commands are Any-packed protobuf)
            self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["change-scan"])
            target, most = self.sessions.scan_options(context)
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
            with self.transactions.inside(context, txn_id, sql):
                return self.statements.flight_info(context, descriptor, sql, default_schema, params)
        schema = self.metadata.schema(context, cmd)
        ticket = p.TicketStatementQuery(self.handles.metadata(descriptor.command)).pack()
        # Several endpoints are disjoint parts of one scan, in no particular order.
        return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, self._locations)], -1, -1,
                                 ordered=False)

    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        cmd = self._descriptor_command(descriptor)
        if isinstance(cmd, (p.CommandStatementQuery, p.CommandPreparedStatementQuery)):
            sql = (cmd.query if isinstance(cmd, p.CommandStatementQuery)
                   else self.handles.open_prepared(cmd.prepared_statement_handle).sql)
            self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["statement-query"])
            call = calls.recognise(sql, bound=False)
            if call is not None and call.writes:
                return flight.SchemaResult(call.result_schema)  # asking must not commit
            if call is None and self.engine.classify(sql) == Kind.WRITE:
                # Asking for the schema must not run the write: its result is one count row.
                return flight.SchemaResult(WRITE_RESULT_SCHEMA)
            return flight.SchemaResult(self.get_flight_info(context, descriptor).schema)
        return flight.SchemaResult(self.metadata.schema(context, cmd))

    # -- DoGet -------------------------------------------------------------------------------

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        """Run a ticket GetFlightInfo issued: only sealed tickets, checked again before they run."""
        cmd = self._command(ticket.ticket)
        if not isinstance(cmd, p.TicketStatementQuery):
            raise errors.InvalidArgument("DoGet takes a ticket from GetFlightInfo, not a command")
        principal = self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["ticket"])
        started = time.perf_counter()
        sealed = cmd.statement_handle
        if sealed.startswith(f"icefloe.{CHANGES_PURPOSE}.".encode()):
            return self.changes.do_get(sealed)
        if calls.answers(sealed):
            return self.calls.do_get(sealed)
        if sealed.startswith(b"icefloe." + HandleCodec.METADATA.encode()):
            inner = self._command(self.handles.open_metadata(sealed))
            return bounded_stream(self.metadata.table(context, inner))
        return self.statements.do_get(context, sealed, principal, started)

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
            writer.write(pa.py_buffer(self.statements.bind_parameters(context, cmd, reader)))
        elif isinstance(cmd, p.CommandStatementUpdate):
            with self.transactions.inside(context, cmd.transaction_id, cmd.query):
                count = self.statements.update(context, cmd.query, None, None)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandPreparedStatementUpdate):
            prepared = self.handles.open_prepared(cmd.prepared_statement_handle)
            params = read_parameters(reader)
            if params is None:
                params = prepared.params
            with self.transactions.inside(context, prepared.transaction_id, prepared.sql):
                count = self.statements.update(context, prepared.sql, prepared.default_schema, params)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        elif isinstance(cmd, p.CommandStatementIngest):
            tid = cmd.transaction_id or self.transactions.adbc_ingest_transaction(context)
            with self.transactions.inside(context, tid, None):
                count = self._ingest(context, cmd, reader, implicit=not cmd.transaction_id)
            writer.write(pa.py_buffer(p.DoPutUpdateResult(record_count=count).encode()))
        else:
            raise errors.InvalidArgument(f"{type(cmd).__name__} is not valid for DoPut")

    def _ingest(self, context: flight.ServerCallContext, cmd: p.CommandStatementIngest, reader: Any,
                implicit: bool = False) -> int:
        txn = ACTIVE.get()
        namespace = self.sessions.default_schema(context)
        if txn is not None:
            staged = transactional_ingest(self.appends, context, cmd, namespace, reader,
                                          self.transactions.transactions.catalog_for(txn), implicit)
            if staged is not None:
                return staged
        return ingest(self.appends, context, cmd, namespace, reader)

    # -- DoAction ----------------------------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        kind = action.type
        body = action.body.to_pybytes() if action.body is not None else b""
        if kind in _UNSUPPORTED_ACTIONS:
            raise errors.Unimplemented(_UNSUPPORTED_ACTIONS[kind])
        try:
            if kind == "CreatePreparedStatement":
                prepare = p.ActionCreatePreparedStatementRequest.unpack(body)
                return iter([self.statements.refusals_logged(
                    context, prepare.query, lambda: self.statements.create_prepared(context, prepare))])
            if kind == "ClosePreparedStatement":
                self.statements.close_prepared(context, p.ActionClosePreparedStatementRequest.unpack(body))
                return iter([])
            if kind == "BeginTransaction":
                p.ActionBeginTransactionRequest.unpack(body)
                return iter([self.transactions.begin(context)])
            if kind == "EndTransaction":
                self.transactions.end(context, p.ActionEndTransactionRequest.unpack(body))
                return iter([])
            if kind == "SetSessionOptions":
                return iter([self.sessions.set_options(context, p.SetSessionOptionsRequest.decode(body))])
            if kind == "GetSessionOptions":
                p.GetSessionOptionsRequest.decode(body)
                return iter([self.sessions.get_options(context)])
            if kind == "CloseSession":
                p.CloseSessionRequest.decode(body)
                self.sessions.sessions.close(context)
                return iter([p.CloseSessionResult(status=1).encode()])
        except p.ProtocolError as exc:
            raise errors.InvalidArgument(f"malformed {kind} request: {exc}") from None
        raise errors.InvalidArgument(f"unknown action {kind!r}")

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return list(_ACTIONS)
