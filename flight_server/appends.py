"""Plain Flight appends (DoPut on ``FlightDescriptor.for_path(namespace..., table)``) and the
bulk-ingest entry point that Flight SQL ``CommandStatementIngest`` calls.

Both hand the stream to ``catalog.append.Appender``: Parquet files are written as batches
arrive, then one group commit makes them visible. The PutResult is sent only after that
commit's RocksDB batch is fsync'd. A stream that breaks off commits nothing.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyiceberg.exceptions import TableAlreadyExistsError

from catalog import RocksCatalog
from catalog.append import Appender, AppendResult
from catalog.background_maintenance import BackgroundMaintainer
from catalog.context import commit_context
from catalog.lineage import LineageExporter
from catalog.maintenance import DEFAULT_ORPHAN_GRACE_S, all_tables, maintain
from catalog.names import InvalidNameError, check_name, check_namespace
from catalog.pipes import InvalidPipeCommit, PipeCommit
from catalog.schema_policy import SchemaMismatchError
from flight_server import errors
from flight_server.append_streams import client_errors, read_batches, requested_policy
from flight_server.engine.sql_text import DEFAULT_SCHEMA
from flight_server.observability.metrics import Metrics
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer
from flight_server.security.headers import IDEMPOTENCY_HEADER, PIPE_HEADER, STAGE_HEADER, single_header
from flight_server.staged_appends import StagedAppendService

logger = logging.getLogger("icefloe.appends")

INGEST_MODES = ("create", "append", "replace", "create_append")





def orphan_grace(value: object) -> float:
    """``orphan_grace_s`` as given by a client: a finite number of seconds, at least 0.

    Raises:
        ValueError: Anything else (a bool, a string, NaN, infinity, a negative number).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("orphan_grace_s must be a number")
    grace = float(value)
    if not math.isfinite(grace) or grace < 0:
        raise ValueError("orphan_grace_s must be finite and >= 0")
    return grace
DEFAULT_INGEST_NAMESPACE = (DEFAULT_SCHEMA,)


class AppendService:
    MAINTAIN_ACTION = "icefloe.maintain"
    ACTIONS = (MAINTAIN_ACTION,)

    def __init__(self, catalog: RocksCatalog, appender: Appender, staged: StagedAppendService,
                 lineage: LineageExporter, metrics: Metrics, authorizer: Authorizer, stopping: threading.Event) -> None:
        self.catalog = catalog
        self.appender = appender
        self.staged = staged
        self.lineage = lineage
        self.metrics = metrics
        self.authorizer = authorizer
        self.stopping = stopping
        self.maintainer = BackgroundMaintainer(self.appender, stopping)
        if not catalog.read_only:
            self.maintainer.start()

    def close(self) -> None:
        """Stop background maintenance (before the catalog closes)."""
        self.maintainer.stop()

    # -- DoPut ------------------------------------------------------------------------

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        principal = self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["append"])
        identifier = self._identifier(descriptor)
        key = self._idempotency_key(context)
        pipe = self._pipe_commit(context)
        policy = requested_policy(context)
        job = single_header(context, STAGE_HEADER)
        if job is not None:
            if key is not None or pipe is not None:
                raise errors.InvalidArgument(
                    f"a staged DoPut ({STAGE_HEADER}) takes no {IDEMPOTENCY_HEADER} or {PIPE_HEADER}: "
                    "give the key to icefloe.commit-staged, which commits exactly once per key"
                )
            answer = self.staged.stage(identifier, reader, self._batches(reader, context), job, principal,
                                              policy)
            self._answer(writer, answer, f"staged {answer['rows']} rows for {answer['table']}")
            return
        # track_write: a refused or failed append becomes a FAIL run in lineage.
        with self.lineage.track_write(identifier[:-1], identifier[-1], "append", principal=principal):
            with commit_context(principal=principal):
                result = self._append(identifier, reader, key, context, pipe)
        # Committed, but the client may be gone: a retry with its idempotency key gets this result.
        self._answer(writer, result.to_json(), f"appended to {result.table} at seq {result.commit_seq}")

    @staticmethod
    def _answer(writer: flight.FlightMetadataWriter, answer: dict[str, Any], what: str) -> None:
        try:
            writer.write(pa.py_buffer(json.dumps(answer).encode("utf-8")))
        except OSError:
            logger.info("client left before its PutResult was sent (%s)", what)

    @staticmethod
    def _identifier(descriptor: flight.FlightDescriptor) -> tuple[str, ...]:
        parts: list[str] = []
        for raw in descriptor.path or []:
            try:
                parts.append(raw.decode("utf-8") if isinstance(raw, bytes) else str(raw))
            except UnicodeDecodeError:
                raise errors.InvalidArgument("DoPut path elements must be UTF-8 text") from None
        if len(parts) < 2:
            raise errors.InvalidArgument(
                "DoPut needs FlightDescriptor.for_path(namespace..., table): at least a namespace and a table name"
            )
        try:
            return (*check_namespace(tuple(parts[:-1])), check_name(parts[-1], "table"))
        except InvalidNameError as exc:
            raise errors.InvalidArgument(str(exc)) from None

    @staticmethod
    def _idempotency_key(context: flight.ServerCallContext) -> str | None:
        return single_header(context, IDEMPOTENCY_HEADER)

    @staticmethod
    def _pipe_commit(context: flight.ServerCallContext) -> PipeCommit | None:
        """The ``x-icefloe-pipe`` header: a pipe step whose checkpoint lands with this append."""
        value = single_header(context, PIPE_HEADER)
        if value is None:
            return None
        try:
            return PipeCommit.parse(value)
        except InvalidPipeCommit as exc:
            raise errors.InvalidArgument(f"header {PIPE_HEADER}: {exc}") from None

    def _append(
        self, identifier: tuple[str, ...], reader: Any, key: str | None, context: flight.ServerCallContext | None,
        pipe: PipeCommit | None = None,
    ) -> AppendResult:
        """Append the stream (see ``_append_stream``), counted in the metrics: one call per append."""
        started = time.perf_counter()
        received = [0]  # Arrow bytes read, counted by _batches
        try:
            result = self._append_stream(identifier, reader, key, context, received, pipe)
        except Exception as exc:
            self.metrics.appended(errors.status_of(exc))
            raise
        self.metrics.appended("OK", result.rows, received[0], time.perf_counter() - started)
        return result

    def _append_stream(
        self, identifier: tuple[str, ...], reader: Any, key: str | None, context: flight.ServerCallContext | None,
        received: list[int], pipe: PipeCommit | None = None,
    ) -> AppendResult:
        try:
            schema = reader.schema
        except Exception:
            raise errors.InvalidArgument("the DoPut stream carries no schema") from None
        with client_errors(identifier, "idempotency key"):
            return self.appender.append_stream(
                identifier, schema, self._batches(reader, context, received), idempotency_key=key,
                snapshot_properties=pipe.snapshot_properties() if pipe else None,
                extra=pipe.commit_extra() if pipe else None,
                schema_policy=requested_policy(context),
            )

    def _batches(
        self, reader: Any, context: flight.ServerCallContext | None, received: list[int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        return read_batches(reader, context, self.stopping, received)

    # -- DoAction "icefloe.maintain" ------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        """Run maintenance now: body ``{"table": "ns.t"}`` (or ``{}`` for every table).

        Answers one JSON result per table (see ``MaintenanceReport``).
        """
        principal = self.authorizer.authorize(context, roles.action_role(self.MAINTAIN_ACTION))
        try:
            body = json.loads(action.body.to_pybytes() or b"{}")
            if not isinstance(body, dict):
                raise ValueError
            grace = orphan_grace(body.get("orphan_grace_s", DEFAULT_ORPHAN_GRACE_S))
        except (ValueError, TypeError, RecursionError):
            raise errors.InvalidArgument(
                'icefloe.maintain takes a JSON object: {"table": "ns.t", "orphan_grace_s": 3600} '
                "(orphan_grace_s: a finite number of seconds >= 0)"
            ) from None
        targets = self._maintain_targets(body.get("table"))
        reports = []
        with commit_context(principal=principal):
            for identifier in targets:
                try:
                    report = maintain(self.appender, identifier, orphan_grace_s=grace, worker=self.maintainer.worker)
                except Exception as exc:
                    self.metrics.maintained(errors.status_of(exc))
                    raise
                self.metrics.maintained("OK")
                reports.append(report.to_json())
        return iter([json.dumps(r).encode("utf-8") for r in reports])

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [
            (
                self.MAINTAIN_ACTION,
                'Compact, expire snapshots, remove orphans. Body: {"table": "ns.t", "orphan_grace_s": 3600}',
            )
        ]

    def _maintain_targets(self, table: Any) -> list[tuple[str, ...]]:
        if table is None:
            return all_tables(self.appender)
        if not isinstance(table, str) or "." not in table:
            raise errors.InvalidArgument('"table" must be a qualified name such as "ns.t"')
        identifier = tuple(table.split("."))
        if not self.catalog.table_exists(identifier):
            raise errors.NotFound(f"table {table} does not exist")
        return [identifier]

    # -- Flight SQL bulk ingest ---------------------------------------------------------

    def ingest(
        self,
        context: flight.ServerCallContext,
        *,
        namespace: tuple[str, ...] | None,
        table: str,
        mode: str,
        temporary: bool,
        reader: Any,
        idempotency_key: str | None = None,
    ) -> int:
        """Commit an ADBC / Flight SQL bulk ingest; return the number of rows ingested.

        Modes: ``create`` (the table must not exist), ``append`` (it must exist), ``replace``
        (drop the table if it exists and create it from the stream's schema), ``create_append``
        (create if missing, then append). When a table is created, the whole stream is
        written first, so a failed stream creates (and with ``replace``, drops) nothing.
        Create modes create a missing namespace. Without a namespace the target is
        ``default``. Temporary tables are refused.
        """
        principal = self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["statement-ingest"])
        if temporary:
            raise errors.Unimplemented("temporary tables are not supported by icefloe; ingest into a regular table")
        if mode not in INGEST_MODES:
            raise errors.InvalidArgument(f"unknown ingest mode {mode!r}; expected one of {', '.join(INGEST_MODES)}")
        ns = tuple(namespace) if namespace else DEFAULT_INGEST_NAMESPACE
        try:
            ns = check_namespace(ns)
            name = check_name(table, "table")
        except InvalidNameError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        identifier = (*ns, name)
        if idempotency_key is None:
            idempotency_key = self._idempotency_key(context)
        catalog = self.catalog
        operation = "append" if mode == "append" else mode
        tracked = self.lineage.track_write(ns, name, operation, principal=principal)  # FAIL run on error
        with tracked, commit_context(principal=principal):
            if idempotency_key is not None and catalog.table_exists(identifier):
                first = self.appender.idempotency.get(ns, name, idempotency_key)
                if first is not None:
                    for _ in self._batches(reader, context):
                        pass
                    return int(first["rows"])
            if mode != "append" and not catalog.namespace_exists(ns):
                try:
                    catalog.create_namespace(ns)
                except Exception as exc:  # a concurrent ingest may have created it
                    if not catalog.namespace_exists(ns):
                        raise errors.InvalidArgument(f"cannot create namespace {'.'.join(ns)}: {exc}") from None
            exists = catalog.table_exists(identifier)
            if mode == "create" and exists:
                raise errors.AlreadyExists(f"table {'.'.join(identifier)} already exists")
            if mode == "append" or (mode == "create_append" and exists):
                result = self._append(identifier, reader, idempotency_key, context)
            else:
                result = self._create(identifier, reader, idempotency_key, context, replace=mode == "replace")
        return result.rows

    def _create(
        self,
        identifier: tuple[str, ...],
        reader: Any,
        key: str | None,
        context: flight.ServerCallContext | None,
        replace: bool,
    ) -> AppendResult:
        qualified = ".".join(identifier)
        try:
            return self.appender.create_from_stream(
                identifier, reader.schema, self._batches(reader, context), idempotency_key=key, replace=replace
            )
        except TableAlreadyExistsError:
            raise errors.AlreadyExists(f"table {qualified} already exists (it was created meanwhile)") from None
        except SchemaMismatchError as exc:
            raise errors.InvalidArgument(f"cannot create {qualified} from this input: {exc}") from None
        except (TypeError, ValueError) as exc:  # pyiceberg's schema conversion, idempotency key checks
            raise errors.InvalidArgument(f"cannot create {qualified} from this input: {exc}") from None
