"""Connection limits and timeouts of the HTTP ports, below uvicorn's request handling.

Why: the HTTP ports are open to anyone who can reach them, and uvicorn on its own reads a
request for as long as the client cares to send it and accepts connections until the process
runs out of file descriptors. 20,000 half-sent requests (no credentials needed: login is
checked after the request is read) used up every descriptor of the process, and then Flight
DoPuts failed (RocksDB and Parquet files could not be opened) and new Flight connections
timed out. So, before a single byte is read:

- a total connection cap and a per-client-IP cap, both computed from the process's
  ``RLIMIT_NOFILE`` (at most a quarter of it for the HTTP side, shared by the REST and the
  metrics port) so Flight, RocksDB and DuckDB keep the rest. A connection over a cap is
  answered ``503`` at once (without reading its request) and closed;
- a header timeout: a request whose headers are not complete within ``header_timeout_s`` of
  its first byte (or of the connection) is closed (slowloris);
- the idle keep-alive timeout is uvicorn's own ``timeout_keep_alive``.

Mechanics: uvicorn makes one protocol object per accepted connection from
``Config(http=<class>)``; ``guarded_protocol`` subclasses uvicorn's h11 protocol so the
checks run in ``connection_made``, before uvicorn sees the connection. Errors from
``accept()`` itself (EMFILE and friends, when something else exhausted the descriptors) are
reported by asyncio through the loop's exception handler, once per failed accept;
``AcceptErrorLog`` logs them at most once a second, with a count of those it held back.

Limits of these limits: asyncio accepts a batch of connections (``host.ACCEPT_BATCH``) per
loop turn before any is checked, so for a moment the descriptors in use may exceed the cap by
a few batches. With TLS, asyncio calls ``connection_made`` only after the handshake, so a
client stalling in the handshake holds a descriptor until asyncio's handshake timeout (60 s).
A request whose headers are in but whose body trickles is bounded by the caps, not a timeout.
Behind a reverse proxy every client has the proxy's address: raise the per-IP cap to the
total there (``--http-max-connections-per-ip``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("icefloe.http.limits")

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_CONNECTIONS_PER_IP = 64
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_KEEPALIVE_TIMEOUT_S = 5.0
# The share of the process's descriptors the HTTP side may hold (1/4): the rest stays for
# Flight connections, RocksDB, DuckDB spills, Parquet files and the logs.
NOFILE_SHARE = 4

_OVERLOADED_BODY = (b'{"error":{"message":"too many connections; retry later",'
                    b'"type":"ServiceUnavailableException","code":503}}')
OVERLOADED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: application/json\r\n"
    b"retry-after: 1\r\n"
    b"connection: close\r\n"
    b"content-length: " + str(len(_OVERLOADED_BODY)).encode() + b"\r\n\r\n" + _OVERLOADED_BODY
)


def nofile_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE``, or None when unlimited / unknown."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


@dataclass(frozen=True)
class HttpLimits:
    """The limits asked for (flags); ``effective`` caps them by the descriptors available."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S

    def effective(self, nofile: int | None = None) -> HttpLimits:
        """These limits with the connection caps lowered to a quarter of ``RLIMIT_NOFILE``."""
        nofile = nofile_limit() if nofile is None else nofile
        total = max(1, self.max_connections)
        if nofile is not None:
            total = max(1, min(total, nofile // NOFILE_SHARE))
        per_ip = max(1, min(self.max_connections_per_ip, total))
        return HttpLimits(total, per_ip, self.header_timeout_s, self.keepalive_timeout_s)


class ConnectionGuard:
    """Counts open HTTP connections, in total and per client IP, for every port of a server.

    Thread-safe: each HTTP port runs its own event loop on its own thread, and both share one
    guard because the descriptors they use come from one process.
    """

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits.effective()
        self._lock = threading.Lock()
        self._total = 0
        self._per_ip: dict[str, int] = {}
        self._refused = 0
        self._last_refusal_log = 0.0

    @property
    def open_connections(self) -> int:
        return self._total

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (nothing counted) when over a cap."""
        with self._lock:
            n = self._per_ip.get(ip, 0)
            if self._total < self.limits.max_connections and n < self.limits.max_connections_per_ip:
                self._total += 1
                self._per_ip[ip] = n + 1
                return True
            self._refused += 1
            now = time.monotonic()
            if now - self._last_refusal_log < 1.0:
                return False
            refused, self._refused, self._last_refusal_log = self._refused, 0, now
            total, per_ip = self._total, n
        # Once a second at most: a flood must not become a flood of log lines.
        logger.warning("HTTP connection(s) refused: %d in the last second (open: %d of %d; from %s: %d of %d)",
                       refused, total, self.limits.max_connections, ip, per_ip, self.limits.max_connections_per_ip)
        return False

    def release(self, ip: str) -> None:
        with self._lock:
            self._total = max(0, self._total - 1)
            n = self._per_ip.get(ip, 0) - 1
            if n > 0:
                self._per_ip[ip] = n
            else:
                self._per_ip.pop(ip, None)


def _peer_ip(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return "?"  # a Unix socket or a transport that does not say: one shared bucket


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``guard``'s caps and a header timeout (see the module)."""
    header_timeout_s = guard.limits.header_timeout_s

    class GuardedH11Protocol(H11Protocol):
        _admitted_ip: str | None = None
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            ip = _peer_ip(transport)
            if not guard.admit(ip):
                # Not counted, not handed to uvicorn: answer and close without reading.
                try:
                    transport.write(OVERLOADED_RESPONSE)
                finally:
                    transport.close()
                return
            self._admitted_ip = ip
            super().connection_made(transport)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            ip, self._admitted_ip = self._admitted_ip, None
            if ip is None:
                return  # refused in connection_made: uvicorn never knew it
            self._cancel_header_timer()
            guard.release(ip)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._admitted_ip is None:
                return
            # A new request begins (a keep-alive connection's next one): its headers get the
            # same deadline, counted from its first byte.
            if self._header_timer is None and self.conn.their_state is h11.IDLE:
                self._arm_header_timer()
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._cancel_header_timer()  # the headers are in (or the connection failed)

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_timeout)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.transport is None or self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a response is still being sent (pipelined bytes wait behind it)
            logger.debug("closing an HTTP connection from %s: request headers not complete within %.3g s",
                         self._admitted_ip, header_timeout_s)
            self.transport.close()

    return GuardedH11Protocol


_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class AcceptErrorLog:
    """An event-loop exception handler that logs ``accept()`` failures at most once a second.

    asyncio reports each failed accept (out of descriptors: EMFILE, ENFILE, ...) through the
    loop's exception handler and retries a second later; under a flood that would be a log
    line per connection attempt on every port. Anything else goes to asyncio's default handler.
    """

    def __init__(self, name: str, interval_s: float = 1.0) -> None:
        self.name = name
        self.interval_s = interval_s
        self._last = float("-inf")
        self._held = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        is_accept = "accept" in str(context.get("message", "")).lower()
        if not (is_accept or (isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS)):
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._held += 1
            return
        held, self._held, self._last = self._held, 0, now
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (exc or context.get("message"))
        logger.error("the %s HTTP port cannot accept connections: %s (%d more such errors not logged)",
                     self.name, reason, held)
