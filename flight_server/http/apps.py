"""Assemble the ASGI apps of the HTTP side from route providers.

A provider is ``"module:function"``; the function takes the server's ``HttpDeps`` and returns
Starlette routes, picking out only the collaborators it uses (the catalog, the auth, the feed hub...).
Providers are imported lazily, so a server without ``--rest-port`` / ``--metrics-port``
imports no HTTP code at all.

- ``REST_PROVIDERS``: the Iceberg REST catalog API (``--rest-port``).
- ``OPS_PROVIDERS``: metrics, health and the watch page (``--metrics-port``, and the REST
  port too when it is on, as DESIGN.md says).

Every app is wrapped in ``request_checks.RequestChecks`` (Host allow-list, Origin /
Sec-Fetch-Site and Content-Type checks of state-changing requests) and carries, in
``app.state.connection_guard``, the connection caps shared by all HTTP ports of the server
(``limits.ConnectionGuard``), which ``host.HttpHost`` applies below uvicorn.
"""

from __future__ import annotations

import importlib
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from flight_server.http.deps import HttpDeps
from flight_server.http.limits import ConnectionGuard, HttpLimits
from flight_server.http.request_checks import AllowedHosts, RequestChecks

logger = logging.getLogger("icefloe.http")

RouteProvider = Callable[[HttpDeps], Sequence[BaseRoute]]

REST_PROVIDERS: tuple[str, ...] = ("flight_server.http.rest.routes:routes",)
OPS_PROVIDERS: tuple[str, ...] = ("flight_server.http.ops.routes:routes",)


def _routes(deps: HttpDeps, providers: Sequence[str]) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for spec in providers:
        module_name, _, function = spec.partition(":")
        provider: RouteProvider = getattr(importlib.import_module(module_name), function)
        routes.extend(provider(deps))
    return routes


# One guard per server, shared by its ports: the descriptors they use are the process's.
_GUARDS: weakref.WeakKeyDictionary[Any, ConnectionGuard] = weakref.WeakKeyDictionary()
_GUARDS_LOCK = threading.Lock()


def connection_guard(deps: HttpDeps) -> ConnectionGuard:
    """The connection caps of the server's HTTP ports (made on first use, from its config)."""
    with _GUARDS_LOCK:
        guard = _GUARDS.get(deps)
        if guard is None:
            config = deps.config
            guard = ConnectionGuard(HttpLimits(config.http_max_connections, config.http_max_connections_per_ip,
                                               config.http_header_timeout_s, config.http_keepalive_timeout_s))
            limits = guard.limits
            logger.info("HTTP limits: %d connections, %d per client IP, headers within %g s, idle keep-alive %g s",
                        limits.max_connections, limits.max_connections_per_ip, limits.header_timeout_s,
                        limits.keepalive_timeout_s)
            _GUARDS[deps] = guard
        return guard


def allowed_hosts(deps: HttpDeps) -> AllowedHosts:
    """The Host names the server's HTTP ports answer to (see ``request_checks``)."""
    config = deps.config
    return AllowedHosts(config.host, config.http_allowed_hosts, config.advertise_uris)


def build_app(deps: HttpDeps, providers: Sequence[str], **options: Any) -> Starlette:
    """One Starlette app holding every route of ``providers`` (in order: first match wins),
    behind the request checks, carrying the server's connection guard."""
    hosts = allowed_hosts(deps)
    routes = _routes(deps, providers)
    middleware = [Middleware(RequestChecks, hosts=hosts, routes=routes), *options.pop("middleware", [])]
    app = Starlette(routes=routes, middleware=middleware, **options)
    app.state.connection_guard = connection_guard(deps)
    logger.info("HTTP Host names allowed: %s", hosts.describe())
    return app


def rest_app(deps: HttpDeps) -> Starlette:
    """The app on ``--rest-port``: the REST catalog, then the operator endpoints."""
    return build_app(deps, REST_PROVIDERS + OPS_PROVIDERS)


def ops_app(deps: HttpDeps) -> Starlette:
    """The app on ``--metrics-port``: the operator endpoints."""
    return build_app(deps, OPS_PROVIDERS)
