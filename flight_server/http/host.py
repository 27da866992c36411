"""Run an ASGI app with uvicorn on a thread of the server process.

Why uvicorn (with Starlette for routing): a maintained, widely deployed HTTP/1.1 stack with
TLS, keep-alive, request size handling and a clean programmatic shutdown, small enough to run
next to the Flight server in one process (the REST catalog must share the catalog object).

The socket is bound here, before uvicorn starts, so ``--rest-port 0`` knows its port at once
and the readiness line can name it.

Connections are counted and timed below uvicorn (``limits``): a total and a per-client-IP cap
derived from the process's descriptor limit, a header timeout and uvicorn's idle keep-alive
timeout. The guard is shared by every port of one server (the descriptors are the process's);
the app assembled by ``flight_server.http.apps`` carries it in ``app.state.connection_guard``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any

import uvicorn

from flight_server.http.limits import AcceptErrorLog, ConnectionGuard, HttpLimits, guarded_protocol

logger = logging.getLogger("icefloe.http")

ACCEPT_BATCH = 64
# The kernel's queue of connections not yet accepted: they hold no descriptor of ours, so it
# can be long (a burst waits there instead of being dropped and retried seconds later).
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for HTTPS: the same ``--tls-*`` flags the Flight port uses."""

    cert: str
    key: str
    client_ca: str | None = None


class HttpHost:
    """One HTTP(S) port serving one ASGI app, on a daemon thread.

    Args:
        app: The ASGI application.
        host: Interface to bind.
        port: Port to bind; 0 picks a free one (see ``port`` after ``start``).
        tls: Certificate files for HTTPS; None serves plain HTTP.
        name: Used in the thread name and log lines ("rest", "metrics").
        guard: Connection caps and timeouts; default: the app's ``state.connection_guard``,
            else one of its own with the default limits.
    """

    def __init__(self, app: Any, host: str, port: int, tls: TlsFiles | None = None, name: str = "http",
                 guard: ConnectionGuard | None = None) -> None:
        self.name = name
        if guard is None:
            guard = getattr(getattr(app, "state", None), "connection_guard", None) or ConnectionGuard(HttpLimits())
        self.guard = guard
        self.host = host
        self.tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(128)
        self._socket.set_inheritable(True)
        self.port: int = self._socket.getsockname()[1]
        options: dict[str, Any] = {}
        if tls is not None:
            options.update(ssl_certfile=tls.cert, ssl_keyfile=tls.key)
            if tls.client_ca:
                options.update(ssl_ca_certs=tls.client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
        config = uvicorn.Config(
            app,
            log_config=None,  # our logging configuration stays in charge
            access_log=False,
            lifespan="off",
            http=guarded_protocol(guard),
            # asyncio accepts up to ``backlog`` connections per loop turn before any of them is
            # checked: a small batch keeps the descriptors held by refused ones small too.
            backlog=min(ACCEPT_BATCH, guard.limits.max_connections),
            ws="none",  # no WebSocket routes: an upgrade request is served as plain HTTP
            timeout_keep_alive=guard.limits.keepalive_timeout_s,  # type: ignore[arg-type] # call_later takes float
            # Bodies beyond this are refused by the apps themselves; uvicorn bounds headers.
            h11_max_incomplete_event_size=64 * 1024,
            timeout_graceful_shutdown=5,
            **options,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"icefloe-{name}-http", daemon=True)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start serving; return once uvicorn accepts connections.

        Raises:
            RuntimeError: uvicorn did not start within ``timeout_s`` (e.g. bad TLS files).
        """
        self._thread.start()
        waited = 0.0
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the {self.name} HTTP server failed to start")
            if waited >= timeout_s:
                raise RuntimeError(f"the {self.name} HTTP server did not start within {timeout_s:.0f} s")
            self._thread.join(0.02)
            waited += 0.02
        # asyncio listened with the accept batch size; lengthen the kernel's queue (same socket).
        self._socket.listen(LISTEN_BACKLOG)

    def _run(self) -> None:
        # uvicorn installs signal handlers only on the main thread; ours stay in charge.
        async def serve() -> None:
            asyncio.get_running_loop().set_exception_handler(AcceptErrorLog(self.name))
            await self._server.serve(sockets=[self._socket])

        try:
            asyncio.run(serve())
        except Exception:  # noqa: BLE001 - reported, and start() notices the dead thread
            logger.exception("the %s HTTP server stopped with an error", self.name)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, let running requests finish (bounded), and join the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._socket.close()
