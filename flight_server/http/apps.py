"""Assemble the ASGI apps of the HTTP side from route providers.

A provider is ``"module:function"``; the function takes the server and returns Starlette
routes, picking out only the collaborators it uses (the catalog, the auth, the feed hub...).
Providers are imported lazily, so a server without ``--rest-port`` / ``--metrics-port``
imports no HTTP code at all.

- ``REST_PROVIDERS``: the Iceberg REST catalog API (``--rest-port``).
- ``OPS_PROVIDERS``: metrics, health and the watch page (``--metrics-port``, and the REST
  port too when it is on, as DESIGN.md says).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

RouteProvider = Callable[["IcefloeServer"], Sequence[BaseRoute]]

REST_PROVIDERS: tuple[str, ...] = ("flight_server.http.rest.routes:routes",)
OPS_PROVIDERS: tuple[str, ...] = ("flight_server.http.ops.routes:routes",)


def _routes(server: IcefloeServer, providers: Sequence[str]) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for spec in providers:
        module_name, _, function = spec.partition(":")
        provider: RouteProvider = getattr(importlib.import_module(module_name), function)
        routes.extend(provider(server))
    return routes


def build_app(server: IcefloeServer, providers: Sequence[str], **options: Any) -> Starlette:
    """One Starlette app holding every route of ``providers`` (in order: first match wins)."""
    return Starlette(routes=_routes(server, providers), **options)


def rest_app(server: IcefloeServer) -> Starlette:
    """The app on ``--rest-port``: the REST catalog, then the operator endpoints."""
    return build_app(server, REST_PROVIDERS + OPS_PROVIDERS)


def ops_app(server: IcefloeServer) -> Starlette:
    """The app on ``--metrics-port``: the operator endpoints."""
    return build_app(server, OPS_PROVIDERS)
