"""Routes of the operator endpoints (provider ``flight_server.http.ops.routes:routes``).

- ``GET /metrics``: Prometheus text (families ``icefloe_*``);
- ``GET /healthz``: 200 while the process serves; ``GET /readyz``: 200 when ready (catalog
  open, lineage worker alive), else 503, with the checks as JSON either way;
- ``GET /``: the watch page (package data, no CDN), ``/static/watch.js`` its script;
- ``GET /api/tables``, ``GET /api/lineage?table=ns.t``, ``GET /api/events`` (server-sent
  events): what the page shows;
- ``GET /api/commits?before=SEQ&limit=N&table=ns.t&operation=OP``: the commit history, newest
  first, paged with bounded work (``history``);
- ``GET /api/table?table=ns.t``: one table's files, bytes, snapshots, schema and last
  maintenance (``table_detail``);
- ``GET /api/summary``: the health strip and the chart series (``summary``);
- ``GET /api/ingest``: the connectors: state, rows, lag, checkpoint, last error.

With authentication on (``--users``), every route but ``/healthz`` and ``/readyz`` (left open for
an orchestrator's probes; they reveal only up/ready and the names of the checks) needs the
server's own credentials, as Flight takes them: ``Authorization: Bearer <token>`` (a Flight
Handshake or REST OAuth token) or ``Basic`` with a user's password, of any role (``read`` and
up: the page shows what a reader sees over Flight). Missing or bad credentials get 401 with
``WWW-Authenticate: Basic`` (a browser then asks for the login, and sends it with the page's
script, API calls and event stream), before anything is read.

Event streams are capped per user (``--http-max-event-streams-per-user``, 429 beyond; the
client IP stands for the user without ``--users``) and in total (``--http-max-event-streams``,
503 beyond; admins get a small reserve past it).

Every handler checks its request before it reads anything: a bad one gets a 4xx with a JSON
``{"error": ...}`` and never reaches the catalog. Handlers that read the catalog are plain
functions, which Starlette runs on its thread pool, so the event loop never blocks on RocksDB.
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from typing import TYPE_CHECKING, Any

import pyarrow.flight as flight
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from catalog.names import InvalidNameError, check_name, check_namespace
from flight_server import errors
from flight_server.http.ops import history, table_detail
from flight_server.http.ops.events import CommitBroadcaster, TooManyWatchers, TooManyWatchersForUser
from flight_server.http.ops.summary import Sampler, sampler_of, summary
from flight_server.observability.metrics import CONTENT_TYPE, Metrics
from flight_server.observability.operations import Operations, for_browser

if TYPE_CHECKING:
    from flight_server.http.deps import HttpDeps
    from flight_server.security.auth import AuthMiddlewareFactory, Principal

logger = logging.getLogger("icefloe.http.ops")

_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "watch.js": "text/javascript; charset=utf-8",
    "watch-views.js": "text/javascript; charset=utf-8",
    "watch.css": "text/css; charset=utf-8",
}
# The page's own script and style only: no inline script, nothing from elsewhere.
_PAGE_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
_HTTP_STATUS = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "UNAVAILABLE": 503, "RESOURCE_EXHAUSTED": 503}
MAX_TABLE_PARAM = 1024
OPS_ROLE = "read"  # the least role that may see the operator endpoints (every role has it)
_CHALLENGE = {"www-authenticate": 'Basic realm="icefloe operator", charset="UTF-8"', "cache-control": "no-store"}


def routes(deps: HttpDeps) -> list[BaseRoute]:
    """The provider: takes the server's operations view, metrics, commit hub and stopping flag."""
    config = deps.config
    broadcaster = CommitBroadcaster(deps.catalog.hub, deps.stopping, config.http_max_event_streams,
                                    config.http_max_event_streams_per_user)
    return ops_routes(deps.ops, deps.metrics, broadcaster, deps.auth, sampler_of(deps))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"cache-control": "no-store"})


def _only(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """The request's query parameters, each at most once and each one of ``allowed``.

    Raises:
        errors.InvalidArgument: An unknown or repeated parameter.
    """
    items = request.query_params.multi_items()
    names = [name for name, _ in items]
    for name in names:
        if name not in allowed:
            raise errors.InvalidArgument(f"unknown query parameter {name[:40]!r}")
        if names.count(name) > 1:
            raise errors.InvalidArgument(f"query parameter {name!r} given more than once")
    return dict(items)


def table_param(raw: str | None) -> str:
    """A ``ns.t`` table name from a query parameter, checked without reading the catalog.

    Raises:
        errors.InvalidArgument: Missing, too long, or not a valid ``namespace.table`` name.
    """
    if not raw:
        raise errors.InvalidArgument("give ?table=namespace.table")
    if len(raw) > MAX_TABLE_PARAM:
        raise errors.InvalidArgument("table name too long")
    *namespace, table = raw.split(".")
    try:
        check_namespace(tuple(namespace))
        check_name(table, "table")
    except InvalidNameError as exc:
        raise errors.InvalidArgument(f"not a table name (namespace.table): {exc}") from None
    return raw


def login_refusal(auth: AuthMiddlewareFactory | None, request: Request) -> Response | None:
    """None when the request may go on (auth off, or credentials of a user with ``OPS_ROLE``);
    else the 401 / 403 answer. Checks only headers: nothing is read before it."""
    return login(auth, request)[0]


def login(auth: AuthMiddlewareFactory | None, request: Request) -> tuple[Response | None, Principal | None]:
    """``(refusal, principal)``: the 401 / 403 answer, or None and the caller (None: auth off)."""
    if auth is None:
        return None, None
    try:
        principal = auth.principal_for(request.headers.get("authorization"))
    except flight.FlightUnauthenticatedError as exc:
        message = str(exc).split(". Detail:")[0].strip() or "authentication required"
        return JSONResponse({"error": message}, status_code=401, headers=_CHALLENGE), None
    if not principal.allows(OPS_ROLE):
        return _error(403, f"user {principal.name!r} has role {principal.role}; this needs role {OPS_ROLE}"), None
    return None, principal


def ops_routes(ops: Operations, metrics: Metrics, broadcaster: CommitBroadcaster,
               auth: AuthMiddlewareFactory | None = None, sampler: Sampler | None = None) -> list[BaseRoute]:
    """The routes over these collaborators (see the module docstring); ``auth`` None: no login."""
    if sampler is None:
        sampler = Sampler(metrics, threading.Event())

    def guarded(handler: Any, *allowed: str, open_probe: bool = False) -> Any:
        """Check the login (unless ``open_probe``), refuse unknown parameters, map our errors to
        HTTP statuses, never leak an internal."""

        def endpoint(request: Request) -> Response:
            try:
                refused = None if open_probe else login_refusal(auth, request)
                if refused is not None:
                    return refused
                params = _only(request, allowed)
                result: Response = handler(params)
                return result
            except errors.IcefloeError as exc:
                return _error(_HTTP_STATUS.get(exc.code, 400), str(exc))
            except Exception:
                logger.exception("operator endpoint %s failed", request.url.path)
                return _error(500, "internal error (see the server log)")

        return endpoint

    def metrics_text(_params: dict[str, str]) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE, headers={"cache-control": "no-store"})

    def healthz(_params: dict[str, str]) -> Response:
        return JSONResponse({"status": "alive"}, headers={"cache-control": "no-store"})

    def readyz(_params: dict[str, str]) -> Response:
        health = ops.health()
        body = {"status": "ready" if health["ready"] else "not ready", "checks": health["checks"]}
        return JSONResponse(body, status_code=200 if health["ready"] else 503, headers={"cache-control": "no-store"})

    def tables(_params: dict[str, str]) -> Response:
        body = for_browser({"head": ops.head(), "tables": ops.tables()})
        return JSONResponse(body, headers={"cache-control": "no-store"})

    def existing_table(raw: str | None) -> str:
        table = table_param(raw)
        ops.head()  # Unavailable (503) when the catalog is closed
        if not ops.catalog.table_exists(table):
            raise errors.NotFound(f"table {table} does not exist")
        return table

    def commits(params: dict[str, str]) -> Response:
        table = existing_table(params["table"]) if "table" in params else None
        before, limit, operation = history.parse_query(params)
        body = history.page(ops.catalog, before, limit, table, operation)
        return JSONResponse(for_browser(body), headers={"cache-control": "no-store"})

    def table(params: dict[str, str]) -> Response:
        body = table_detail.detail(ops.catalog, existing_table(params.get("table")))
        return JSONResponse(for_browser(body), headers={"cache-control": "no-store"})

    def summary_json(_params: dict[str, str]) -> Response:
        body = summary(ops, metrics, sampler, broadcaster)
        return JSONResponse(for_browser(body), headers={"cache-control": "no-store"})

    def lineage(params: dict[str, str]) -> Response:
        return JSONResponse(ops.lineage_graph(table_param(params.get("table"))), headers={"cache-control": "no-store"})

    def ingest(_params: dict[str, str]) -> Response:
        return JSONResponse(for_browser({"connectors": ops.ingest()}), headers={"cache-control": "no-store"})

    def static(name: str) -> Any:
        body = resources.files("flight_server.http.ops").joinpath("static", name).read_bytes()

        def serve(_params: dict[str, str]) -> Response:
            return Response(body, media_type=_STATIC[name], headers=_PAGE_HEADERS)

        return serve

    async def events(request: Request) -> Response:
        refused, principal = await run_in_threadpool(login, auth, request)  # Basic hashes a password
        if refused is not None:
            return refused
        # Streams are capped per user: the login name, or the client's address without --users.
        if principal is not None:
            user, admin = f"user:{principal.name}", principal.allows("admin")
        else:
            user, admin = f"ip:{request.client.host if request.client else '?'}", False
        try:
            _only(request, ())
            client = broadcaster.open(user, admin)
        except errors.IcefloeError as exc:
            return _error(400, str(exc))
        except TooManyWatchersForUser as exc:
            return _error(429, str(exc))
        except TooManyWatchers as exc:
            return _error(503, str(exc))
        try:
            head = await run_in_threadpool(ops.head)
        except errors.IcefloeError as exc:
            broadcaster.close(client)
            return _error(503, str(exc))
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(broadcaster.stream(client, head), media_type="text/event-stream", headers=headers)

    get = ["GET"]
    return [
        Route("/metrics", guarded(metrics_text), methods=get),
        Route("/healthz", guarded(healthz, open_probe=True), methods=get),
        Route("/readyz", guarded(readyz, open_probe=True), methods=get),
        # The page reads these two itself (page size and bound of its commit list).
        Route("/", guarded(static("index.html"), "page_size", "max_rows"), methods=get),
        Route("/static/watch.js", guarded(static("watch.js")), methods=get),
        Route("/static/watch-views.js", guarded(static("watch-views.js")), methods=get),
        Route("/static/watch.css", guarded(static("watch.css")), methods=get),
        Route("/api/tables", guarded(tables), methods=get),
        Route("/api/lineage", guarded(lineage, "table"), methods=get),
        Route("/api/commits", guarded(commits, "before", "limit", "table", "operation"), methods=get),
        Route("/api/table", guarded(table, "table"), methods=get),
        Route("/api/summary", guarded(summary_json), methods=get),
        Route("/api/ingest", guarded(ingest), methods=get),
        Route("/api/events", events, methods=get),
    ]
