"""Checks every HTTP request passes before any route sees it: Host, Origin, Content-Type.

Why: the REST catalog changes the catalog on POST / DELETE, and browsers can be made to send
such requests from any page. A form (``Content-Type: text/plain`` or form-encoded) posted
from ``http://evil.example`` created namespaces and renamed tables; with ``--users`` a browser
that once logged in to the watch page even sent the credentials along. And any ``Host`` was
accepted, so a page whose name the attacker re-points at the server (DNS rebinding) could
read and write as if it were same-origin. The checks, in this order (each before anything
is read, before login):

1. ``Host`` must name this server (``AllowedHosts``), on every method: else ``421``
   (Misdirected Request), or ``400`` when there is no Host at all.
2. State-changing methods (POST, PUT, PATCH, DELETE) are refused with ``403`` when
   ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``, or when ``Origin`` is present and not
   one of the server's own origins. An own origin is ``scheme://host[:port]`` (http or https;
   the port defaults by the scheme) whose ``host[:port]`` passes the Host allow-list below.
   Non-browser clients (pyiceberg, Iceberg-Java, curl) send neither header and pass.
3. State-changing methods must carry ``Content-Type: application/json`` (parameters such as
   ``charset`` allowed), which a browser cannot send cross-origin without a CORS preflight
   (and this server answers no preflight): else ``415``. Exceptions: the OAuth token endpoint
   ``/v1/oauth/tokens`` takes ``application/x-www-form-urlencoded`` (RFC 6749), and a DELETE
   without a body may come without a Content-Type.

Errors use the REST spec's error model ``{"error": {"message", "type", "code"}}`` on both apps.

The Host allow-list (``AllowedHosts``) for a request that came in on local address
``IP:PORT`` (the port the server is bound to):

- the bound ``--host`` (``0.0.0.0`` / ``::`` too: an IP literal is never a rebound name) and
  ``localhost`` (when bound to loopback or to all interfaces), each with the bound port;
- any IP literal equal to the local address the connection arrived at, with the bound port
  (a DNS-rebinding page always carries the attacker's *name*, never an IP literal; this also
  admits probes that address a pod or machine by IP);
- when bound to all interfaces (``0.0.0.0`` / ``::``, not a host name): the machine's host
  name and fully qualified name, with the bound port;
- the host names of ``--advertise-uri`` (the fleet's names), with the bound port;
- each ``--http-allowed-host`` (``ICEFLOE_HTTP_ALLOWED_HOSTS``, comma-separated): ``name`` (any
  port: for names reached through a proxy or a port mapping), ``name:port``, ``*.domain``
  (any name under it), or ``*`` (no Host check; only behind a proxy that checks it).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger("icefloe.http.requests")

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
FORM_PATHS = frozenset({"/v1/oauth/tokens"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
MAX_HOST_CHARS = 255
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_DEFAULT_PORT = {"http": 80, "https": 443}


def split_host(value: str, default_port: int | None) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host-header-like value (lowercased, no trailing dot), or None when
    it is not a host name, an IPv4 address or a bracketed IPv6 address with an optional port."""
    value = value.strip().lower()
    if not value or len(value) > MAX_HOST_CHARS:
        return None
    port: int | None = default_port
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        try:
            ipaddress.IPv6Address(name.split("%")[0])
        except ValueError:
            return None
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                return None
            port = int(rest[1:])
    else:
        name, sep, port_text = value.rpartition(":")
        if not sep:
            name = port_text
        elif not port_text.isdigit() or len(port_text) > 5:
            return None
        else:
            port = int(port_text)
        name = name.rstrip(".")
        if not _NAME.match(name):
            return None
    if port is not None and not 0 < port < 65536:
        return None
    return name, port


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return None


def _is_loopback(name: str) -> bool:
    address = _ip(name)
    return name == "localhost" or (address is not None and address.is_loopback)


@dataclass
class AllowedHosts:
    """The names this server answers to (see the module docstring).

    Args:
        bind_host: ``--host``.
        extra: ``--http-allowed-host`` entries.
        advertise_uris: ``--advertise-uri`` values (their host names are taken).
    """

    bind_host: str
    extra: Iterable[str] = ()
    advertise_uris: Iterable[str] = ()
    any_host: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        bind = self.bind_host.strip("[]").lower()
        self._wildcard = bind in WILDCARD_BINDS
        names: set[str] = set()
        if bind:
            names.add(bind)  # 0.0.0.0 / :: too: an IP literal, never a rebound name
        if self._wildcard or _is_loopback(bind):
            names.add("localhost")
        if self._wildcard:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    names.add(name.lower().rstrip("."))
        for uri in self.advertise_uris:
            host = urlsplit(uri if "://" in uri else f"//{uri}").hostname
            if host:
                names.add(host.lower().rstrip("."))
        self._bound_names = frozenset(names)  # with the bound port
        self._any_port: set[str] = set()
        self._with_port: set[tuple[str, int]] = set()
        self._suffixes: list[str] = []
        for raw in self.extra:
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                self.any_host = True
            elif entry.startswith("*."):
                self._suffixes.append(entry[1:].rstrip("."))
            else:
                parsed = split_host(entry, None)
                if parsed is None:
                    raise ValueError(f"--http-allowed-host {raw!r} is not a host name, host:port or *.domain")
                name, port = parsed
                if port is None:
                    self._any_port.add(name)
                else:
                    self._with_port.add((name, port))

    def describe(self) -> str:
        if self.any_host:
            return "any Host (--http-allowed-host '*')"
        names = sorted(self._bound_names) + sorted(self._any_port) + [f"{n}:{p}" for n, p in sorted(self._with_port)]
        names += [f"*{s}" for s in self._suffixes]
        return ", ".join(names) + " and the address a connection arrives at"

    def allows(self, name: str, port: int | None, local: tuple[str, int] | None) -> bool:
        """Whether ``name:port`` (port None: not said) names this server for a connection that
        arrived at ``local`` (ip, port)."""
        if self.any_host:
            return True
        if name in self._any_port or (port is not None and (name, port) in self._with_port):
            return True
        if any(name.endswith(suffix) for suffix in self._suffixes):
            return True
        if local is None:
            return False
        local_ip, bound_port = local
        if port != bound_port:
            return False
        if name in self._bound_names:
            return True
        address, arrived = _ip(name), _ip(str(local_ip))
        return address is not None and arrived is not None and _same_ip(address, arrived)


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _same_ip(a: IpAddress, b: IpAddress) -> bool:
    if isinstance(b, ipaddress.IPv6Address) and b.ipv4_mapped is not None:
        b = b.ipv4_mapped
    return a == b


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status,
                        headers={"cache-control": "no-store"})


def _media_type(value: str | None) -> str | None:
    if value is None:
        return None
    return value.split(";", 1)[0].strip().lower()


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() not in ("", "0"))


class RequestChecks:
    """ASGI middleware applying the checks of the module docstring to every HTTP request.

    Args:
        app: The app behind.
        hosts: The Host allow-list.
        routes: The app's routes: a state-changing request no route takes (for that path and
            method) changes nothing and goes on to get its 404 / 405 from the router.
            None: check every request.
    """

    def __init__(self, app: ASGIApp, hosts: AllowedHosts, routes: Sequence[BaseRoute] | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.routes = routes

    def _routed(self, scope: Scope) -> bool:
        if self.routes is None:
            return True
        for route in self.routes:
            if route.matches(scope)[0] is Match.FULL:
                # A mounted app that routes by itself (the REST catalog) says whether it takes it.
                handles = getattr(getattr(route, "app", None), "handles", None)
                return bool(handles(scope)) if callable(handles) else True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        """The answer refusing this request, or None when it may go on."""
        headers = Headers(scope=scope)
        scheme = scope.get("scheme", "http")
        local = scope.get("server")
        local_addr = (str(local[0]), int(local[1])) if local and local[1] is not None else None
        host_values = headers.getlist("host")
        if len(host_values) != 1:
            what = "no Host header" if not host_values else "more than one Host header"
            return _error(400, "BadRequestException", f"{what}: a request must name the server in one Host header")
        host = split_host(host_values[0], _DEFAULT_PORT.get(scheme))
        if host is None or not self.hosts.allows(host[0], host[1], local_addr):
            logger.info("HTTP request refused: Host %r is not a name of this server", host_values[0][:80])
            return _error(421, "MisdirectedRequestException",
                          "this server does not answer to that Host name (add it with --http-allowed-host)")
        method = scope.get("method", "GET")
        if method not in STATE_CHANGING or not self._routed(scope):
            return None
        site = headers.get("sec-fetch-site", "").strip().lower()
        if site in ("cross-site", "same-site"):
            logger.info("HTTP %s refused: Sec-Fetch-Site %s", method, site)
            return _error(403, "ForbiddenException", f"{method} from another site is refused (Sec-Fetch-Site: {site})")
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin, local_addr):
            logger.info("HTTP %s refused: Origin %r is not this server", method, origin[:80])
            return _error(403, "ForbiddenException",
                          f"{method} from another origin is refused (Origin is not this server)")
        media = _media_type(headers.get("content-type"))
        path = scope.get("path", "")
        if path in FORM_PATHS:
            if media != FORM:
                return _error(415, "UnsupportedMediaTypeException", f"the token endpoint takes Content-Type {FORM}")
            return None
        if method == "DELETE" and media is None and not _has_body(headers):
            return None
        if media != JSON:
            said = "no Content-Type" if media is None else f"Content-Type {media[:60]!r}"
            return _error(415, "UnsupportedMediaTypeException", f"{method} needs Content-Type {JSON} (got {said})")
        return None

    def _own_origin(self, origin: str, local: tuple[str, int] | None) -> bool:
        origin = origin.strip()
        scheme, sep, rest = origin.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in _DEFAULT_PORT or not rest or "/" in rest or "@" in rest:
            return False  # "null", paths, user info, other schemes: not us
        parsed = split_host(rest, _DEFAULT_PORT[scheme])
        return parsed is not None and self.hosts.allows(parsed[0], parsed[1], local)
