"""The Flight server: owns the catalog and routes each RPC to the service that handles it.

Routing only; the work lives in one service per capability:
- ``flightsql``: Flight SQL commands (GetFlightInfo / DoGet / DoPut(CMD) / DoAction);
- ``appends``: plain Flight appends (DoPut on a path descriptor);
- ``feed``: the DoExchange commit and row feeds.

The server builds each service from the collaborators it uses (the catalog, the engine's
settings, the ``Authorizer``, the handle signer, metrics, the query log, lineage...), never
from itself: no module below this one imports it (``tests/test_import_layout.py``).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from catalog import RocksCatalog
from catalog.background_maintenance import seconds_from_env
from catalog.lineage import LineageExporter
from catalog.lineage.index import LineageIndex
from flight_server import errors
from flight_server.config import Config
from flight_server.engine.quality import DuckDBQualityGate
from flight_server.flightsql.sessions import SessionMiddlewareFactory
from flight_server.lineage_setup import lineage_settings
from flight_server.observability.metrics import Metrics, rpc
from flight_server.observability.querylog import QueryLog
from flight_server.security.auth import action_floor, build_security, put_floor
from flight_server.security.authorizer import Authorizer
from flight_server.security.handles import HandleSigner
from flight_server.security.headers import MIDDLEWARE_KEY as HEADERS_MIDDLEWARE_KEY
from flight_server.security.tokens import load_or_create_keys
from flight_server.workers.pool import ReadWorkerPool

logger = logging.getLogger("icefloe.server")
# How long SIGTERM waits for running calls before closing anyway (a feed stream blocked on a
# client that stopped reading never ends by itself); the variable lets a test or an operator
# change it.
SHUTDOWN_GRACE_S = 10.0
SHUTDOWN_GRACE_ENV = "ICEFLOE_SHUTDOWN_GRACE_S"


class IcefloeServer(flight.FlightServerBase):  # type: ignore[misc]  # pyarrow ships no type stubs
    """Arrow Flight (SQL) server over a ``RocksCatalog`` warehouse."""

    def __init__(self, config: Config, catalog: RocksCatalog | None = None, **kwargs: Any) -> None:
        from catalog.append import Appender
        from flight_server.appends import AppendService
        from flight_server.feed import FeedService
        from flight_server.flightsql.dispatcher import FlightSqlDeps, FlightSqlService
        from flight_server.staged_appends import StagedAppendService

        errors.install_clean_tracebacks()
        self.config = config
        # First: every service records into them from its first call on.
        self.metrics = Metrics()
        self.querylog = QueryLog(self.metrics, config.slow_query_ms)
        # Validate security flags before opening anything (a bad flag must not hold the catalog).
        self.security = build_security(config)
        self.authorizer = Authorizer(self.security.auth)
        # Every ticket and handle given to clients is sealed with the warehouse's keys, so any
        # server on the same warehouse can run it and no client can forge one.
        self.handle_signer = HandleSigner(load_or_create_keys(config.key_folder)[0])
        self.catalog = catalog or RocksCatalog("icefloe", **config.catalog_properties(), **{"read-only": "false"})
        _ensure_default_schema(self.catalog)
        # Set when shutdown begins, so long-lived streams (the feed) end and let gRPC drain.
        self.stopping = threading.Event()
        # Lineage outbox: registered before serving so no commit is missed; started below.
        # A write whose client cancelled or went away mid-stream is an ABORT run, not a FAIL.
        self.lineage = LineageExporter(self.catalog, abort_errors=(errors.Cancelled,))
        # The lineage tables (icefloe.lineage.*): their hold is registered before serving too.
        self.lineage_index = LineageIndex(self.catalog, self.lineage.events_for)
        self.lineage_index.build_ready = lambda: self.lineage.settings is not None
        # Each service is built from the collaborators it uses, never from the server.
        appender = Appender(self.catalog)
        appender.quality_gate = DuckDBQualityGate()
        appender.on_quality = self.metrics.record_quality
        self.staged = StagedAppendService(appender, self.handle_signer, self.lineage)
        self.appends = AppendService(self.catalog, appender, self.staged, self.lineage, self.metrics, self.authorizer,
                                     self.stopping)
        # Read workers (--read-workers): started once this server is ready (serve), not waited for.
        self.read_workers = ReadWorkerPool(config, config.read_workers) if config.read_workers else None
        read_worker = self.read_workers.next_location if self.read_workers else (lambda: None)
        self.flightsql = FlightSqlService(FlightSqlDeps(config, self.catalog, self.authorizer, self.handle_signer,
                                                        self.querylog, self.stopping, self.appends, self.lineage,
                                                        read_worker))
        self.feed = FeedService(self.catalog, self.authorizer, self.metrics, self.stopping, config.max_subscribers)
        from flight_server.observability.operations import Operations

        self.ops = Operations(self.catalog, self.lineage, self.flightsql.engine, self.feed.fanout, self.metrics,
                              self.authorizer.authorize)
        from flight_server.ingest.service import IngestService

        self.ingest = IngestService(self.catalog, appender, self.metrics, config)
        middleware = dict(kwargs.pop("middleware", None) or {})
        middleware.update(self.security.middleware)
        # One middleware gives handlers the call's headers, its end and its session.
        middleware.setdefault(HEADERS_MIDDLEWARE_KEY, SessionMiddlewareFactory())
        super().__init__(config.location, middleware=middleware, **{**self.security.server_kwargs, **kwargs})
        # --port 0 asks the OS for a port; keep the one we got.
        self.config.port = self.port
        self.lineage.start(lineage_settings(config))
        self.lineage_index.start()
        self.flightsql.engine.lineage_ready = lambda: self.lineage_index.wait_for(self.catalog.log.head())
        self.ops.lineage_ready = self.flightsql.engine.lineage_ready
        self.ops.ingest_status = self.ingest.statuses
        self.ingest.start()  # connectors commit through the appender, watched by lineage
        self.http_hosts: list[Any] = []  # flight_server.http.host.HttpHost, started by start_http

    def start_http(self) -> list[str]:
        """Start the HTTP side that the config asks for; return the lines to log for it.

        Raises:
            RuntimeError: An HTTP port could not be bound or served.
            OSError: The port is taken.
        """
        config = self.config
        if config.rest_port is None and config.metrics_port is None:
            return []
        from flight_server.http import apps
        from flight_server.http.deps import HttpDeps
        from flight_server.http.host import HttpHost, TlsFiles

        tls = None
        if config.tls_cert and config.tls_key:
            tls = TlsFiles(config.tls_cert, config.tls_key, config.tls_client_ca)
        deps = HttpDeps(config, self.catalog, self.metrics, self.ops, self.security.auth, self.stopping)
        lines: list[str] = []
        for name, port, app, line in (
            ("rest", config.rest_port, apps.rest_app, "icefloe REST catalog on {url}"),
            ("metrics", config.metrics_port, apps.ops_app, "icefloe metrics on {url}/metrics"),
        ):
            if port is None:
                continue
            host = HttpHost(app(deps), config.host, port, tls, name=name)
            host.start()
            self.http_hosts.append(host)
            setattr(config, f"{name}_port", host.port)  # --*-port 0: keep the port we got
            lines.append(line.format(url=host.url))
        return lines

    def reload_users(self) -> None:
        """SIGHUP: re-read the users file, here and in every read worker."""
        self.security.reload_users()
        if self.read_workers is not None:
            self.read_workers.reload_users()

    # -- access control ----------------------------------------------------------------

    def authorize(self, context: flight.ServerCallContext, role: str) -> str | None:
        """The caller's principal name if it may act with ``role`` (see ``Authorizer.authorize``)."""
        return self.authorizer.authorize(context, role)

    def principal_name(self, context: flight.ServerCallContext) -> str | None:
        return self.authorizer.principal_name(context)

    # -- RPC routing ---------------------------------------------------------------------

    @rpc
    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        return self.flightsql.get_flight_info(context, descriptor)

    @rpc
    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        return self.flightsql.get_schema(context, descriptor)

    @rpc
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        return self.flightsql.do_get(context, ticket)

    @rpc
    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        self.authorize(context, put_floor(descriptor))  # deny-by-default floor; handlers may ask more
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            return self.appends.do_put(context, descriptor, reader, writer)
        return self.flightsql.do_put(context, descriptor, reader, writer)

    @rpc
    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        return self.feed.do_exchange(context, descriptor, reader, writer)

    @rpc
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        principal = self.authorize(context, action_floor(action.type))  # deny-by-default floor; handlers may ask more
        if action.type in self.staged.ACTIONS:
            return self.staged.do_action(context, action, principal)
        if action.type in self.appends.ACTIONS:
            return self.appends.do_action(context, action)
        if action.type in self.ops.ACTIONS:
            return self.ops.do_action(context, action)
        if action.type in self.ingest.ACTIONS:
            return self.ingest.do_action(context, action, principal)
        return self.flightsql.do_action(context, action)

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return (self.flightsql.list_actions(context) + self.appends.list_actions(context)
                + self.staged.list_actions() + self.ops.list_actions() + self.ingest.list_actions())

    def list_flights(self, context: flight.ServerCallContext, criteria: bytes) -> Iterator[flight.FlightInfo]:
        return iter(())

    # -- lifecycle -----------------------------------------------------------------------

    def shutdown_and_close(self, grace_s: float = SHUTDOWN_GRACE_S) -> bool:
        """Stop serving and close the catalog; return False if some call outlived ``grace_s``.

        A feed stream blocked writing to a client that stopped reading cannot notice
        ``stopping``, and gRPC's shutdown waits for every call, so the wait is bounded.
        """
        self.stopping.set()
        for host in self.http_hosts:
            host.stop()
        stopper = threading.Thread(target=self.shutdown, name="icefloe-shutdown", daemon=True)
        stopper.start()
        stopper.join(grace_s)
        if stopper.is_alive():
            logger.warning("some calls did not finish within %.0f s of shutdown; closing anyway", grace_s)
        if self.read_workers is not None:
            self.read_workers.close()
        self.ingest.close()  # before the appender and catalog its commits go through
        self.feed.close()
        self.appends.close()
        self.flightsql.close()
        self.lineage.stop()
        self.lineage_index.stop()
        self.querylog.close()
        self.catalog.close()
        return not stopper.is_alive()


def _ensure_default_schema(catalog: RocksCatalog) -> None:
    """Every Flight SQL session starts in ``default``: it must exist (see flightsql.sessions)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from flight_server.engine.sql_text import DEFAULT_SCHEMA

    if not catalog.namespace_exists((DEFAULT_SCHEMA,)):
        try:
            catalog.create_namespace((DEFAULT_SCHEMA,))
        except NamespaceAlreadyExistsError:
            pass  # another server on the warehouse made it first


class StartupError(Exception):
    """The server cannot start; the message is one line for the operator (what and what to do)."""


def _port_in_use(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` already. Bound as gRPC binds (SO_REUSEADDR),
    so a port that only has connections in TIME_WAIT counts as free, as it is for gRPC."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False  # an unknown host: gRPC's own error says so
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:  # (not e.g. an address family this host lacks)
                    return True
    return False


def _start(config: Config) -> IcefloeServer:
    """Construct the server, turning what commonly stops a start into one ``StartupError`` line
    (a held warehouse, a port in use, an unreadable warehouse) instead of a traceback."""
    from catalog.catalog_errors import CatalogReadOnlyError
    from flight_server.ingest.specs import InvalidSpec

    in_use = (
        f"port {config.port} on {config.host} is already in use (another icefloe serve?); stop that process, "
        "or pick another --port (--port 0 picks a free one)"
    )
    if config.port and _port_in_use(config.host, config.port):
        raise StartupError(in_use)  # before the warehouse is opened: nothing to undo
    try:
        return IcefloeServer(config)
    except InvalidSpec as exc:
        raise StartupError(str(exc)) from None
    except CatalogReadOnlyError:
        raise StartupError(
            f"the warehouse {config.warehouse} is in use by another process (another icefloe serve?); one server "
            "serves a warehouse: stop it, or serve another --warehouse (clients of the running server use --uri)"
        ) from None
    except (OSError, pa.ArrowException) as exc:
        if config.port and _port_in_use(config.host, config.port):  # taken between the check and the bind
            raise StartupError(in_use) from None
        logger.debug("start-up failed", exc_info=True)
        raise StartupError(f"cannot serve {config.warehouse} on {config.location}: {errors.first_line(exc)}") from None


def serve(config: Config) -> None:
    """Start the server, log the readiness line, and block until SIGTERM/SIGINT.

    Raises:
        StartupError: The server could not start (one line for the operator).
    """
    # Process-wide, so set here (the process entry point), not by IcefloeServer itself.
    sys.setswitchinterval(config.gil_switch_interval_s)
    os.environ.setdefault("PYICEBERG_MAX_WORKERS", str(config.iceberg_max_workers))
    server = _start(config)
    for line in server.security.summary:
        warning = line.startswith("WARNING: ")
        logger.log(logging.WARNING if warning else logging.INFO, "security: %s", line.removeprefix("WARNING: "))
    if config.demo:
        from flight_server.demo import load_demo

        load_demo(server.catalog)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        logger.info("received signal %d, shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, lambda _signum, _frame: server.reload_users())
    try:
        http_lines = server.start_http()
    except (OSError, RuntimeError) as exc:
        server.shutdown_and_close()
        raise StartupError(f"cannot serve HTTP: {exc}") from None
    for line in http_lines:
        logger.info("%s", line)
    if config.gc_thresholds is not None:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*config.gc_thresholds)
    # Only now ready: a SIGTERM sent as soon as the line appears must stop the server cleanly.
    logger.info("icefloe listening on %s", config.location)
    if server.read_workers is not None:
        # After the readiness line: their start-up (imports, opening the catalog) must not
        # compete with the server's own; until one is ready, its share of reads stays here.
        server.read_workers.start()
    # FlightServerBase starts serving in its constructor; serve() would only install Arrow's
    # own signal handlers over ours, so the main thread just waits for a signal instead.
    while not stop.wait(1.0):
        pass
    clean = server.shutdown_and_close(seconds_from_env(SHUTDOWN_GRACE_ENV, SHUTDOWN_GRACE_S))
    logger.info("icefloe stopped")
    # Everything that holds data is closed above and every commit is durable, so leave without
    # the interpreter's exit: a call may still be stuck inside gRPC (``clean`` False), and after
    # an object-store upload abandoned on a stall, garbage collection at exit blocked forever in
    # pyarrow's S3 client (SIGTERM then needed a SIGKILL).
    if not clean:
        logger.info("leaving with a call still inside gRPC")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
