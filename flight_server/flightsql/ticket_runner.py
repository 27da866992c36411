"""Running a sealed statement ticket (DoGet): the part of a query that any server on the
warehouse can do, the primary or one of its read workers (``flight_server.workers``).

A ticket carries all its query needs (the SQL, the default schema, every pinned snapshot, the
bound parameters and, with authentication on, the principal it was issued to), so the process
running it needs no session, no transaction registry and no catalog write access: only the
engine over the catalog, the handle codec that verifies the seal, and the query log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors
from flight_server.engine import Engine, Kind
from flight_server.flightsql import metadata as md
from flight_server.flightsql.statements import HandleCodec, StatementHandle, param_rows
from flight_server.message_size import bounded_stream, record_batch_stream, sliced
from flight_server.observability.querylog import QueryLog

# How a ticket that reads a transaction's own writes is run: inside that transaction's view
# (only the primary holds transactions; elsewhere such a ticket is refused).
OwnWrites = Callable[[StatementHandle, "str | None"], AbstractContextManager[None]]


@contextlib.contextmanager
def no_transactions(handle: StatementHandle, _principal: str | None) -> Iterator[None]:
    """A process without transactions (a read worker): a ticket naming one is not run here."""
    if handle.transaction_id:
        raise errors.FailedPrecondition(
            "this ticket reads a transaction's own writes; only the primary server runs it")
    yield


class TicketRunner:
    """Opens sealed statement tickets and streams their query's results."""

    def __init__(self, engine: Engine, handles: HandleCodec, querylog: QueryLog,
                 own_writes: OwnWrites = no_transactions,
                 caught_up: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext) -> None:
        self.engine = engine
        self.handles = handles
        self.querylog = querylog
        self.own_writes = own_writes
        # A read-only catalog (a read worker's) catches up with the writer once per ticket,
        # not at each of the ticket's catalog reads (RocksCatalog.caught_up).
        self.caught_up = caught_up

    def annotated(self, schema: pa.Schema, handle: StatementHandle) -> pa.Schema:
        """A result schema with the column metadata clients read (same at GetFlightInfo and DoGet)."""
        if handle.written is not None:
            return schema
        return md.annotate(schema, self.engine.column_origins(handle.sql, handle.pins, handle.default_schema))

    def do_get(self, context: flight.ServerCallContext, sealed: bytes, principal: str | None,
               started: float) -> flight.FlightDataStream:
        """Run the query a sealed statement ticket holds; its stream is logged when it ends."""
        handle = self.handles.open_statement(sealed)
        # A query of no table (SELECT 1) reads nothing of the catalog: no catch-up for it.
        with self.caught_up() if handle.pins else contextlib.nullcontext():
            return self._do_get(context, handle, principal, started)

    def _do_get(self, context: flight.ServerCallContext, handle: StatementHandle, principal: str | None,
                started: float) -> flight.FlightDataStream:
        if handle.principal is not None and handle.principal != principal:
            # A ticket is as good as the credentials of the user it was planned for: another
            # user holding it (leaked, replayed) does not get that user's reads.
            raise errors.PermissionDenied("this ticket was issued to another user; plan the query yourself")
        # Defence in depth: a sealed ticket only ever holds a query GetFlightInfo planned, but
        # what runs here is classified (and sandbox-checked by the engine) again anyway.
        if self.engine.classify(handle.sql) != Kind.QUERY:
            raise errors.InvalidArgument("this ticket does not hold a query")
        rows = param_rows(handle.params)
        try:
            with self.own_writes(handle, principal):
                # Cast by the engine, which ties the query's end to the reader it returns: a
                # cast made here reads the engine's reader from C++ after this code dropped it,
                # and its query ended then, its slot and cursor serving another query at once.
                reader = self.engine.execute(
                    handle.sql, handle.pins, handle.default_schema, rows[0] if rows else None, context=context,
                    annotate=lambda schema: self.annotated(schema, handle),
                )
        except Exception as exc:
            self.querylog.record(handle.sql, principal, started, errors.status_of(exc))
            raise
        if rows is not None and len(rows) > 1:
            reader = self._each_row(reader, handle, rows, principal, context)
        if handle.readback:
            return bounded_stream(reader)  # a write's count: the write is logged already
        # Counted per batch (rows, bytes), cut to message size in the same pass, and logged
        # once the stream ends.
        return record_batch_stream(self.querylog.streamed(reader, handle.sql, principal, started, split=sliced))

    def _each_row(
        self, first: pa.RecordBatchReader, handle: StatementHandle, rows: list[list[Any]], principal: str | None,
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
                with self.own_writes(handle, principal):
                    reader = self.engine.execute(handle.sql, handle.pins, handle.default_schema, row, context=context)

        return pa.RecordBatchReader.from_batches(schema, batches())
