"""The REST catalog's router: raw-path matching, body bounds, auth and the error envelope.

``routes(deps)`` is the provider ``flight_server.http.apps`` loads; it mounts one ASGI app
under ``/v1``. Matching is done here on the raw (still percent-encoded) path, because a
decoded path has lost the difference between a ``/`` between segments and a ``%2F`` inside
a name. Handlers are plain functions run on a worker thread (the catalog blocks on fsync),
inside a commit context naming the principal and the client, so every commit they make
records who made it and with which engine.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, URLPath
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog.context import commit_context
from catalog.object_store import client_config
from flight_server.http.rest import namespaces, tables, views
from flight_server.http.rest.auth import RestAuth
from flight_server.http.rest.errors import RestError, bad_request, error_response, from_exception
from flight_server.http.rest.updates import Locations
from flight_server.http.rest.wire import Call
from flight_server.security import roles

if TYPE_CHECKING:
    from catalog import RocksCatalog
    from flight_server.http.deps import HttpDeps

logger = logging.getLogger("icefloe.http.rest")

MAX_BODY_BYTES = 16 * 1024 * 1024  # a commit's JSON (new snapshots, schemas) is far smaller
MAX_QUERY_BYTES = 8 * 1024
MAX_HEADER_CHARS = 256  # of a client header copied into the commit log

Handler = Callable[[Call], Response]


@dataclass(frozen=True)
class Endpoint:
    method: str
    pattern: tuple[str, ...]  # literal segments, or "{name}" for a decoded parameter
    handler: Handler
    form: bool = False  # the token endpoint: no auth, a form body

    @property
    def role(self) -> str:
        """Least role of the caller, from the roles table shared with Flight (admin if absent)."""
        return roles.rest_role(self.method, self.pattern)


class RestCatalogApp:
    """The ASGI app serving ``/v1/...`` of the Iceberg REST catalog API.

    Args:
        catalog: The server's catalog (shared with Flight).
        auth: Authentication and roles.
    """

    def __init__(self, catalog: RocksCatalog, auth: RestAuth) -> None:
        self.catalog = catalog
        self.auth = auth
        locations = Locations(catalog.files)
        ns = namespaces.NamespaceHandlers(catalog)
        tb = tables.TableHandlers(catalog, locations)
        vw = views.ViewHandlers(catalog, locations)
        self.endpoints: list[Endpoint] = [
            Endpoint("GET", ("config",), self.config),
            Endpoint("POST", ("oauth", "tokens"), lambda call: self.auth.token(call.body), form=True),
            Endpoint("GET", ("namespaces",), ns.list),
            Endpoint("POST", ("namespaces",), ns.create),
            Endpoint("GET", ("namespaces", "{namespace}"), ns.load),
            Endpoint("HEAD", ("namespaces", "{namespace}"), ns.exists),
            Endpoint("DELETE", ("namespaces", "{namespace}"), ns.drop),
            Endpoint("POST", ("namespaces", "{namespace}", "properties"), ns.update_properties),
            Endpoint("GET", ("namespaces", "{namespace}", "tables"), tb.list),
            Endpoint("POST", ("namespaces", "{namespace}", "tables"), tb.create),
            Endpoint("POST", ("namespaces", "{namespace}", "register"), tb.register),
            Endpoint("GET", ("namespaces", "{namespace}", "tables", "{table}"), tb.load),
            Endpoint("HEAD", ("namespaces", "{namespace}", "tables", "{table}"), tb.exists),
            Endpoint("POST", ("namespaces", "{namespace}", "tables", "{table}"), tb.commit),
            Endpoint("DELETE", ("namespaces", "{namespace}", "tables", "{table}"), tb.drop),
            Endpoint("POST", ("namespaces", "{namespace}", "tables", "{table}", "metrics"), tb.metrics),
            Endpoint("POST", ("tables", "rename"), tb.rename),
            Endpoint("POST", ("transactions", "commit"), tb.commit_transaction),
            Endpoint("GET", ("namespaces", "{namespace}", "views"), vw.list),
            Endpoint("POST", ("namespaces", "{namespace}", "views"), vw.create),
            Endpoint("GET", ("namespaces", "{namespace}", "views", "{view}"), vw.load),
            Endpoint("HEAD", ("namespaces", "{namespace}", "views", "{view}"), vw.exists),
            Endpoint("POST", ("namespaces", "{namespace}", "views", "{view}"), vw.replace),
            Endpoint("DELETE", ("namespaces", "{namespace}", "views", "{view}"), vw.drop),
            Endpoint("POST", ("views", "rename"), vw.rename),
            Endpoint("POST", ("namespaces", "{namespace}", "register-view"), vw.register),
        ]

    # -- the config endpoint -------------------------------------------------------------

    def config(self, call: Call) -> Response:
        """``GET /v1/config``: the warehouse location and the endpoints this server serves."""
        asked = call.query.get("warehouse")
        if asked is not None and not self._is_our_warehouse(asked):
            raise bad_request("unknown warehouse: this server serves one warehouse (omit the parameter)")
        served = sorted({f"{e.method} /v1/{{prefix}}/{'/'.join(e.pattern)}" for e in self.endpoints
                         if e.pattern[0] not in ("config", "oauth")})
        return JSONResponse({
            "defaults": {},
            # An object-store warehouse: what engines need to reach the bucket (endpoint,
            # region, addressing style, the server's static keys); LoadTable repeats it.
            "overrides": {**client_config(self.catalog._io_properties(), self.catalog.warehouse),
                          "warehouse": self.catalog.warehouse},
            "endpoints": served,
        })

    def _is_our_warehouse(self, asked: str) -> bool:
        if asked in (self.catalog.name, self.catalog.warehouse):
            return True
        try:
            Locations(self.catalog.files).check(asked, "warehouse")
        except RestError:
            return False
        # Any spelling of the same folder (a path, file:///p, Hadoop's file:/p), judged on the real path.
        return self.catalog.files.canonical(asked.rstrip("/")) == self.catalog.files.root

    # -- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        head = request.method == "HEAD"
        try:
            endpoint, params = self._match(scope)
            response = await self._serve(request, endpoint, params)
        except RestError as exc:
            response = error_response(exc, head)
        await response(scope, receive, send)

    def handles(self, scope: Scope) -> bool:
        """Whether an endpoint takes this path and method: ``RequestChecks`` leaves requests no
        endpoint takes (they change nothing) to get their precise 404 / 405 / 400 here."""
        try:
            self._match(scope)
        except RestError:
            return False
        return True

    def _match(self, scope: Scope) -> tuple[Endpoint, dict[str, str]]:
        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        raw_path = raw.split(b"?", 1)[0]
        try:
            text = raw_path.decode("ascii")
        except UnicodeDecodeError:
            raise bad_request("request path must be ASCII (percent-encode names)") from None
        text = text[len("/v1"):] if text.startswith("/v1") else text
        segments = text.strip("/").split("/") if text.strip("/") else []
        method = scope["method"]
        allowed: list[str] = []
        for endpoint in self.endpoints:
            params = _bind(endpoint.pattern, segments)
            if params is None:
                continue
            if endpoint.method == method:
                return endpoint, params
            allowed.append(endpoint.method)
        if allowed:
            raise RestError(405, "MethodNotAllowedException", f"method {method} is not allowed here "
                            f"(allowed: {', '.join(sorted(set(allowed)))})")
        raise RestError(404, "NotFoundException", "no such REST catalog endpoint")

    async def _serve(self, request: Request, endpoint: Endpoint, params: dict[str, str]) -> Response:
        if len(request.scope.get("query_string", b"")) > MAX_QUERY_BYTES:
            raise bad_request("query string too long")
        principal = None
        if not endpoint.form:
            principal = self.auth.principal(request.headers.get("authorization"))
            self.auth.require(principal, endpoint.role)
        body = await _read_body(request)
        query = dict(parse_qsl(request.url.query, keep_blank_values=True))
        call = Call(request.method, params, query, request.headers, body, principal, _client_details(request.headers))
        return await run_in_threadpool(self._run, endpoint, call)

    @staticmethod
    def _run(endpoint: Endpoint, call: Call) -> Response:
        try:
            with commit_context(principal=call.principal.name if call.principal else None, extra=call.extra):
                return endpoint.handler(call)
        except Exception as exc:  # noqa: BLE001 - every error gets a status; unknown ones are bugs
            error = from_exception(exc)
            if error is None:
                logger.exception("REST %s %s failed", endpoint.method, "/".join(endpoint.pattern))
                error = RestError(500, "ServiceFailureException", "internal error (logged on the server)")
            return error_response(error, call.method == "HEAD")


def _bind(pattern: tuple[str, ...], segments: Sequence[str]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params: dict[str, str] = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{"):
            try:
                params[want[1:-1]] = unquote(got, errors="strict")
            except UnicodeDecodeError:
                raise bad_request("a name in the path is not valid UTF-8 once percent-decoded") from None
        elif want != got:
            return None
    return params


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared[:20]) > MAX_BODY_BYTES):
        raise RestError(413, "BadRequestException", f"request body larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RestError(413, "BadRequestException", f"request body larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def _clean(value: str) -> str:
    return _PRINTABLE.sub("?", value)[:MAX_HEADER_CHARS]


def engine_of(headers: Headers) -> str | None:
    """The client library named by the request headers, when it says."""
    agent = headers.get("user-agent", "").lower()
    version = headers.get("x-client-version", "")
    if "pyiceberg" in agent:
        return "pyiceberg"
    if version.startswith("Apache Iceberg"):
        return "iceberg-java"
    return None


def _client_details(headers: Headers) -> dict[str, Any]:
    extra: dict[str, Any] = {"via": "rest"}
    if engine := engine_of(headers):
        extra["engine"] = engine
    if agent := headers.get("user-agent"):
        extra["user_agent"] = _clean(agent)
    if version := headers.get("x-client-version"):
        extra["client_version"] = _clean(version)
    return extra


class PrefixRoute(BaseRoute):
    """Everything under ``/v1`` to one ASGI app, whatever bytes the names hold.

    Starlette's ``Mount`` matches with a regular expression whose ``.`` stops at a newline,
    so a name holding ``%0A`` would miss the app and get a bare 404; this matches by prefix.
    """

    def __init__(self, prefix: str, app: ASGIApp) -> None:
        self.prefix = prefix
        self.app = app

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == self.prefix or path.startswith(self.prefix + "/")):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def routes(deps: HttpDeps) -> list[BaseRoute]:
    """The REST catalog's routes for ``flight_server.http.apps.REST_PROVIDERS``."""
    auth = RestAuth(deps.auth, deps.config.token_ttl_s)
    return [PrefixRoute("/v1", RestCatalogApp(deps.catalog, auth))]
