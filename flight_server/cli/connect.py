"""How every client command names and reaches its server: one set of click options.

``--uri`` (``ICEFLOE_URI``), ``--token`` (``ICEFLOE_TOKEN``), ``--user`` (``ICEFLOE_USER``; the
password is read on stdin) and ``--tls-root-certs`` (``ICEFLOE_TLS_ROOT_CERTS``) mean the same
in ``icefloe sql``, ``subscribe``, ``maintain``, ``load`` and ``login``. The spellings of
earlier releases (``--server`` / ``ICEFLOE_SERVER``, ``--location`` / ``ICEFLOE_LOCATION``)
still work for one release, hidden from ``--help``, with a warning on stderr. ``login_token``
is the client side of a login (Basic on Handshake, a bearer token back), for ``--user`` and
``icefloe login``.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
import pyarrow as pa
import pyarrow.flight as flight

DEFAULT_URI = "grpc://127.0.0.1:31337"
# Old spellings: (option, environment variable), kept for one release.
_ALIASES = (("--server", "ICEFLOE_SERVER"), ("--location", "ICEFLOE_LOCATION"))

F = TypeVar("F", bound=Callable[..., Any])


def clean_error(exc: BaseException, uri: str | None = None) -> str:
    """A Flight / Arrow error's message without gRPC's debug context or a server detail;
    with ``uri``, a server that cannot be reached is named."""
    text = str(exc).strip() or type(exc).__name__
    for cut in (". Detail:", ". gRPC client debug context", "\ngRPC client debug context"):
        text = text.split(cut, 1)[0]
    text = re.sub(r"^Flight returned \w+ error, with message: ", "", text.strip())
    if uri and isinstance(exc, flight.FlightUnavailableError) and "connect" in text.lower():
        return f"cannot reach the server at {uri} (is it running?): {text}"
    if uri and isinstance(exc, flight.FlightUnauthenticatedError):
        return f"{text} (give --user NAME, with the password on stdin, or --token TOKEN)"
    return text


def login_token(location: str, user: str, password: str, tls_root_certs: str | None = None,
                timeout_s: float = 30.0) -> str:
    """The bearer token the server issues for ``user`` (without the ``Bearer `` prefix).

    Raises:
        ValueError: With a message for the user (bad credentials, server unreachable, ...).
    """
    roots = Path(tls_root_certs).read_bytes() if tls_root_certs else None
    client = flight.FlightClient(location, tls_root_certs=roots)
    try:
        _, value = client.authenticate_basic_token(user, password, flight.FlightCallOptions(timeout=timeout_s))
    except flight.FlightUnauthenticatedError:
        raise ValueError("login refused: invalid username or password") from None
    except pa.ArrowNotImplementedError:
        raise ValueError("the server has no logins (it runs without --users): connect without a token") from None
    except (flight.FlightError, pa.ArrowException) as exc:
        raise ValueError(f"login failed: {clean_error(exc, location)}") from None
    finally:
        client.close()
    header = bytes(value).decode("ascii", "replace")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ValueError("the server issued no bearer token")
    return token


def read_login_password(user: str) -> str:
    """The password of ``user``: prompted once on a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"Password for {user}: ")
    line = sys.stdin.readline()
    if not line:
        raise click.ClickException(f"--user {user}: no password on stdin (send it as the first line)")
    return line.removesuffix("\n").removesuffix("\r")


@dataclass
class Connection:
    """A server and the credentials to use with it, as the options gave them."""

    uri: str
    token: str | None = None
    user: str | None = None
    tls_root_certs: str | None = None
    _roots: bytes | None = field(default=None, repr=False)
    _headers: list[tuple[bytes, bytes]] | None = field(default=None, repr=False)

    def roots(self) -> bytes | None:
        """The PEM bytes of ``--tls-root-certs`` (None without it)."""
        if self.tls_root_certs and self._roots is None:
            try:
                self._roots = Path(self.tls_root_certs).read_bytes()
            except OSError as exc:
                message = f"--tls-root-certs: cannot read {self.tls_root_certs}: {exc.strerror}"
                raise click.ClickException(message) from None
        return self._roots

    def client(self) -> flight.FlightClient:
        """A Flight client for the server (not yet connected: errors come with the first call)
        that keeps the server's session cookie, as the JDBC driver does: the session holds the
        current schema and what SQL ``BEGIN`` opened, so a script's transaction is one."""
        try:
            return flight.FlightClient(self.uri, tls_root_certs=self.roots(), middleware=[SessionCookie()])
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise click.ClickException(f"--uri {self.uri!r} is not a server location "
                                       f"(grpc://HOST:PORT or grpc+tls://HOST:PORT): {clean_error(exc)}") from None

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Call headers: the bearer token of ``--token``, or of a login as ``--user``."""
        if self._headers is None:
            token = self.token
            if self.user is not None:
                try:
                    token = login_token(self.uri, self.user, read_login_password(self.user), self.tls_root_certs)
                except ValueError as exc:
                    raise click.ClickException(str(exc)) from None
            self._headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        return self._headers

    def options(self, timeout_s: float | None = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self.headers(), timeout=timeout_s)


class SessionCookie(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Sends back the cookie the server set (one client's session)."""

    def __init__(self) -> None:
        self.cookie: str | None = None

    def start_call(self, info: Any) -> flight.ClientMiddleware:
        return _CookieCall(self)


class _CookieCall(flight.ClientMiddleware):  # type: ignore[misc]
    def __init__(self, jar: SessionCookie) -> None:
        self.jar = jar

    def sending_headers(self) -> dict[str, str]:
        return {"cookie": self.jar.cookie} if self.jar.cookie else {}

    def received_headers(self, headers: dict[str, Any]) -> None:
        for value in headers.get("set-cookie", []):
            self.jar.cookie = (value.decode() if isinstance(value, bytes) else str(value)).split(";", 1)[0]


def _resolve(ctx: click.Context, values: dict[str, Any], default_uri: str | None) -> str | None:
    """``--uri``, else an old spelling on the command line, else ``ICEFLOE_URI``, else an old
    environment variable, else the default."""
    uri = values.pop("uri")
    aliases = {name: values.pop(name.lstrip("-")) for name, _ in _ALIASES}
    source = ctx.get_parameter_source("uri")
    if source == click.core.ParameterSource.COMMANDLINE:
        return str(uri)
    given = [(name, value) for name, value in aliases.items() if value]
    on_line = [
        (name, value) for name, value in given
        if ctx.get_parameter_source(name.lstrip("-")) == click.core.ParameterSource.COMMANDLINE
    ]
    for name, _value in on_line:
        click.echo(f"icefloe: {name} is deprecated; use --uri (ICEFLOE_URI)", err=True)
    if on_line:
        if len({v for _, v in on_line}) > 1:
            raise click.UsageError("--server and --location name different servers; give one --uri")
        return str(on_line[0][1])
    if source == click.core.ParameterSource.ENVIRONMENT:
        return str(uri)
    if given:
        name = given[0][0]
        env = dict(_ALIASES)[name]
        click.echo(f"icefloe: {env} is deprecated; use ICEFLOE_URI", err=True)
        return str(given[0][1])
    return default_uri


def server_options(*, default_uri: str | None = DEFAULT_URI, login: bool = False) -> Callable[[F], F]:
    """The options that name a server and its credentials; the command gets ``conn: Connection``
    (``None`` when ``default_uri`` is None and no server was named).

    ``login=True`` (``icefloe login``): ``--user`` is required and there is no ``--token``.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **values: Any) -> Any:
            ctx = click.get_current_context()
            uri = _resolve(ctx, values, default_uri)
            token = values.pop("token", None) or None
            user = values.pop("user") or None
            roots = values.pop("tls_root_certs") or None
            if token and user:
                raise click.UsageError("give --token or --user, not both (ICEFLOE_TOKEN and ICEFLOE_USER count too)")
            conn = Connection(uri, token=token, user=user, tls_root_certs=roots) if uri else None
            return fn(*args, conn=conn, **values)

        shown_default = default_uri or "none"
        options = [
            click.option("--uri", envvar="ICEFLOE_URI", default=default_uri, show_default=shown_default,
                         help="Server location, grpc://HOST:PORT or grpc+tls://HOST:PORT."),
            *[click.option(name, name.lstrip("-"), envvar=env, default=None, hidden=True) for name, env in _ALIASES],
            click.option("--user", envvar="ICEFLOE_USER", required=login, default=None,
                         help="Log in as this user; the password is read on stdin (first line, or a prompt)."),
            click.option("--tls-root-certs", envvar="ICEFLOE_TLS_ROOT_CERTS", default=None,
                         help="PEM file of the CA that signed the server's certificate (grpc+tls)."),
        ]
        if not login:
            options.append(click.option("--token", envvar="ICEFLOE_TOKEN", default=None,
                                        help="Bearer token (from `icefloe login`) for a server with --users."))
        decorated: Callable[..., Any] = wrapper
        for option in reversed(options):
            decorated = option(decorated)
        return decorated  # type: ignore[return-value]

    return decorate
