"""One read worker: a Flight server over the warehouse that only runs statement tickets.

Started by ``pool.ReadWorkerPool`` as ``python -m flight_server.workers``. Its
first stdin line is the server's configuration (JSON); stdin then stays open as the parent's
lifeline: end of file means the primary is gone, and the worker stops (so does
``PR_SET_PDEATHSIG`` on Linux, should the pipe be inherited elsewhere). When it serves, it
writes one line ``READY <uri>`` to stdout, the pipe the pool reads.

The worker opens the catalog as a RocksDB secondary (read-only; every catalog read catches up
with the primary first), checks the caller's credentials as the primary does (same users file,
same token keys), and runs only what a ticket carries, for the principal it names.
Everything else (planning, writes, sessions, transactions, the feed) is the primary's.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import pyarrow.flight as flight

from catalog import RocksCatalog
from flight_server import errors
from flight_server.config import Config
from flight_server.engine import Engine
from flight_server.flightsql import protocol as p
from flight_server.flightsql.statements import MAX_HANDLE_BYTES, HandleCodec
from flight_server.flightsql.ticket_runner import TicketRunner
from flight_server.observability.logging_config import configure_logging
from flight_server.observability.metrics import Metrics, rpc
from flight_server.observability.querylog import QueryLog
from flight_server.security import roles
from flight_server.security.auth import build_security
from flight_server.security.authorizer import Authorizer
from flight_server.security.handles import HandleSigner
from flight_server.security.headers import MIDDLEWARE_KEY as HEADERS_MIDDLEWARE_KEY
from flight_server.security.headers import HeadersMiddlewareFactory
from flight_server.security.tokens import load_or_create_keys

logger = logging.getLogger("icefloe.worker")

READY_PREFIX = "READY "
_ONLY_TICKETS = ("a read worker only runs query tickets (DoGet); send this call to the server that planned "
                 "the query")


class ReadWorkerServer(flight.FlightServerBase):  # type: ignore[misc]  # pyarrow ships no type stubs
    """DoGet of statement tickets over a read-only catalog; every other call is refused."""

    def __init__(self, config: Config) -> None:
        errors.install_clean_tracebacks()
        self.config = config
        self.metrics = Metrics()
        self.querylog = QueryLog(self.metrics, config.slow_query_ms)
        self.security = build_security(config)
        self.authorizer = Authorizer(self.security.auth)
        signer = HandleSigner(load_or_create_keys(config.key_folder)[0])
        self.catalog = RocksCatalog("icefloe", **config.catalog_properties(), **{"read-only": "true"})
        self.stopping = threading.Event()
        self.engine = Engine.for_config(self.catalog, config, self.stopping)
        self.runner = TicketRunner(self.engine, HandleCodec(signer), self.querylog, caught_up=self.catalog.caught_up)
        middleware = dict(self.security.middleware)
        # No session middleware: a worker keeps no sessions (and offers no cookie a client
        # could carry back to the primary in place of its own).
        middleware[HEADERS_MIDDLEWARE_KEY] = HeadersMiddlewareFactory()
        super().__init__(config.location, middleware=middleware, **self.security.server_kwargs)
        self.config.port = self.port

    @rpc
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        data = ticket.ticket
        if not data or len(data) > MAX_HANDLE_BYTES:
            raise errors.InvalidArgument("DoGet takes a ticket from GetFlightInfo")
        try:
            cmd = p.decode_command(data)
        except p.ProtocolError as exc:
            raise errors.InvalidArgument(f"malformed ticket: {exc}") from None
        if not isinstance(cmd, p.TicketStatementQuery):
            raise errors.InvalidArgument("DoGet takes a ticket from GetFlightInfo, not a command")
        principal = self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["ticket"])
        # Only statement tickets are sent here: anything else fails the seal check of one.
        return self.runner.do_get(context, cmd.statement_handle, principal, time.perf_counter())

    @rpc
    def get_flight_info(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> Any:
        raise errors.Unimplemented(_ONLY_TICKETS)

    @rpc
    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> Any:
        raise errors.Unimplemented(_ONLY_TICKETS)

    @rpc
    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader: Any,
               writer: Any) -> None:
        raise errors.Unimplemented(_ONLY_TICKETS)

    @rpc
    def do_exchange(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader: Any,
                    writer: Any) -> None:
        raise errors.Unimplemented(_ONLY_TICKETS)

    @rpc
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Any:
        raise errors.Unimplemented(_ONLY_TICKETS)

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return []

    def list_flights(self, context: flight.ServerCallContext, criteria: bytes) -> Any:
        return iter(())

    def close_all(self, grace_s: float = 5.0) -> None:
        """Stop serving (running queries are interrupted), then close the engine and catalog."""
        self.stopping.set()
        stopper = threading.Thread(target=self.shutdown, name="icefloe-worker-shutdown", daemon=True)
        stopper.start()
        stopper.join(grace_s)
        self.engine.close()
        self.querylog.close()
        self.catalog.close()


def config_to_json(config: Config) -> str:
    """The configuration a worker is started with (one line)."""
    return json.dumps(dataclasses.asdict(config), separators=(",", ":"))


def config_from_json(line: str) -> Config:
    raw: dict[str, Any] = json.loads(line)
    tuples = {f.name for f in dataclasses.fields(Config) if "tuple" in str(f.type)}
    values: dict[str, Any] = {k: tuple(v) if k in tuples and v is not None else v for k, v in raw.items()}
    return Config(**values)


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGTERM when the process that started this one exits."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        logger.debug("PR_SET_PDEATHSIG is not available; the stdin lifeline alone ends the worker")


class _WorkerPrefix(logging.Filter):
    """Marks every line a worker logs (it shares the primary's stderr) with the worker's number."""

    def __init__(self, index: str) -> None:
        super().__init__()
        self.prefix = f"read worker {index}: "

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            record.msg = self.prefix + str(record.msg)
        return True


def main() -> None:
    _die_with_parent()
    parent = os.getppid()
    config = config_from_json(sys.stdin.readline())
    configure_logging(config.log_level, config.log_format)
    prefix = _WorkerPrefix(sys.argv[1] if len(sys.argv) > 1 else "?")
    for handler in logging.getLogger("icefloe").handlers:  # configure_logging's one handler
        handler.addFilter(prefix)
    sys.setswitchinterval(config.gil_switch_interval_s)
    os.environ.setdefault("PYICEBERG_MAX_WORKERS", str(config.iceberg_max_workers))
    stop = threading.Event()

    def _lifeline() -> None:
        sys.stdin.read()  # returns at end of file: the primary closed the pipe or died
        stop.set()

    threading.Thread(target=_lifeline, name="icefloe-worker-lifeline", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to the primary, which stops us
    server = ReadWorkerServer(config)
    signal.signal(signal.SIGHUP, lambda _signum, _frame: server.security.reload_users())
    if config.gc_thresholds is not None:  # as the primary does (see Config.gc_thresholds)
        gc.collect()
        gc.freeze()
        gc.set_threshold(*config.gc_thresholds)
    os.write(1, f"{READY_PREFIX}{config.location}\n".encode())
    while not stop.wait(1.0):
        if os.getppid() != parent:  # adopted: the primary is gone
            break
    server.close_all()
    logging.shutdown()
    os._exit(0)  # no interpreter teardown: nothing of the worker is durable
