"""How the data source reaches its server: the options shared by every read, stream and write.

``uri`` (``grpc://`` or ``grpc+tls://``), ``token`` / ``tokenEnv`` / ``tokenFile``, ``user`` with
``passwordEnv`` (a Basic handshake exchanged for a bearer token), ``tls.rootCerts``,
``tls.skipVerify``, ``tls.certChain`` + ``tls.privateKey`` (mutual TLS), ``headers.<name>``,
``timeout.call`` (seconds per call), ``retries`` (attempts on ``UNAVAILABLE``, with backoff).

A :class:`Settings` holds only plain values (it is pickled to Spark's executors, which open their
own clients); secrets are read from the environment or a file where the client runs, so a plan or
a log shows the name of a variable, never a token.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from flight_server.flightsql.protocol import CommandStatementQuery

logger = logging.getLogger("icefloe.spark")

T = TypeVar("T")

SCAN_TARGET_BYTES = "icefloe.scan.target-partition-bytes"
SCAN_MAX_PARTITIONS = "icefloe.scan.max-partitions"


class IcefloeSparkError(Exception):
    """A data source option or a server answer the connector cannot work with."""


class TableNotFound(IcefloeSparkError):
    """The table does not exist (the message is the server's, with its "did you mean")."""


def option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """One option, case-insensitively (Spark lowercases some spellings, not all)."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return default


def int_option(options: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    """A whole-number option, at least ``minimum``; a precise error names the option."""
    raw = option(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise IcefloeSparkError(f"option {name} must be a whole number, got {str(raw)[:40]!r}") from None
    if value < minimum:
        raise IcefloeSparkError(f"option {name} must be >= {minimum}, got {value}")
    return value


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = option(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise IcefloeSparkError(f"option {name} must be true or false, got {str(raw)[:40]!r}")


@dataclass(frozen=True)
class Settings:
    """Where the server is and how to authenticate; plain values only (picklable)."""

    uri: str
    token: str | None = field(default=None, repr=False)
    token_env: str | None = None
    token_file: str | None = None
    user: str | None = None
    password_env: str | None = None
    tls_root_certs: str | None = None
    tls_skip_verify: bool = False
    tls_cert_chain: str | None = None
    tls_private_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    call_timeout_s: float | None = None
    retries: int = 4

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Settings:
        """Read the connection options.

        Args:
            options: The data source options (any case).

        Returns:
            The settings.

        Raises:
            IcefloeSparkError: ``uri`` is missing or not a Flight location, or an option is malformed.
        """
        uri = option(options, "uri")
        if not uri:
            raise IcefloeSparkError('option uri is required, e.g. .option("uri", "grpc://127.0.0.1:31337")')
        if not uri.startswith(("grpc://", "grpc+tcp://", "grpc+tls://")):
            raise IcefloeSparkError(f"option uri must be grpc://HOST:PORT or grpc+tls://HOST:PORT, got {uri[:80]!r}")
        headers = tuple(sorted((k[len("headers."):].lower(), v) for k, v in options.items()
                               if k.lower().startswith("headers.")))
        timeout = option(options, "timeout.call")
        try:
            call_timeout = float(timeout) if timeout is not None else None
        except ValueError:
            raise IcefloeSparkError(f"option timeout.call must be seconds, got {str(timeout)[:40]!r}") from None
        if option(options, "user") and not option(options, "passwordEnv"):
            raise IcefloeSparkError("option user needs passwordEnv (the environment variable holding the password)")
        return cls(
            uri=uri,
            token=option(options, "token"),
            token_env=option(options, "tokenEnv"),
            token_file=option(options, "tokenFile"),
            user=option(options, "user"),
            password_env=option(options, "passwordEnv"),
            tls_root_certs=option(options, "tls.rootCerts"),
            tls_skip_verify=bool_option(options, "tls.skipVerify", False),
            tls_cert_chain=option(options, "tls.certChain"),
            tls_private_key=option(options, "tls.privateKey"),
            headers=headers,
            call_timeout_s=call_timeout,
            retries=int_option(options, "retries", 4) or 0,
        )

    def connect(self) -> Client:
        """A client for this process (executors and the driver each open their own)."""
        return Client(self)


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise IcefloeSparkError(f"option {what}: cannot read the file ({exc.strerror})") from None


def _env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise IcefloeSparkError(f"option {what}: environment variable {name} is not set where Spark runs")
    return value


def is_retryable(exc: BaseException) -> bool:
    # FlightClient.get_schema reports UNAVAILABLE as a plain ArrowIOError (it checks its status
    # as an Arrow one, not a Flight one), with Flight's wording.
    return isinstance(exc, flight.FlightUnavailableError) or (
        isinstance(exc, pa.ArrowIOError) and str(exc).startswith("Flight returned unavailable error"))


def clean(exc: BaseException) -> str:
    """A Flight error's message without gRPC's debug context."""
    text = str(exc).strip() or type(exc).__name__
    for cut in (". Detail:", ". gRPC client debug context", "\ngRPC client debug context"):
        text = text.split(cut, 1)[0]
    return text


class Client:
    """A pyarrow.flight client with the settings' credentials, headers and retries."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        kwargs: dict[str, Any] = {}
        if settings.tls_root_certs:
            kwargs["tls_root_certs"] = _read(settings.tls_root_certs, "tls.rootCerts")
        if settings.tls_skip_verify:
            kwargs["disable_server_verification"] = True
        if settings.tls_cert_chain or settings.tls_private_key:
            if not (settings.tls_cert_chain and settings.tls_private_key):
                raise IcefloeSparkError("mutual TLS needs both tls.certChain and tls.privateKey")
            kwargs["cert_chain"] = _read(settings.tls_cert_chain, "tls.certChain")
            kwargs["private_key"] = _read(settings.tls_private_key, "tls.privateKey")
        self.flight = flight.FlightClient(settings.uri, **kwargs)
        self._headers = [(k.encode(), v.encode()) for k, v in settings.headers]
        token = self._token()
        if token:
            self._headers.append((b"authorization", f"Bearer {token}".encode()))

    def _token(self) -> str | None:
        s = self.settings
        if s.token:
            return s.token
        if s.token_env:
            return _env(s.token_env, "tokenEnv")
        if s.token_file:
            return _read(s.token_file, "tokenFile").decode().strip()
        if s.user:
            assert s.password_env is not None
            password = _env(s.password_env, "passwordEnv")
            pair = self.retrying(lambda: self.flight.authenticate_basic_token(
                s.user, password, flight.FlightCallOptions(timeout=s.call_timeout_s)))
            value: bytes = pair[1]
            return value.decode().removeprefix("Bearer ")
        return None

    def options(self, extra: list[tuple[bytes, bytes]] | None = None, timeout_s: float | None = None
                ) -> flight.FlightCallOptions:
        """Call options: the credentials and ``headers.*``, plus ``extra``."""
        return flight.FlightCallOptions(headers=self._headers + (extra or []),
                                        timeout=timeout_s if timeout_s is not None else self.settings.call_timeout_s)

    @property
    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        return list(self._headers)

    def retrying(self, call: Callable[[], T]) -> T:
        """Run ``call``, retrying ``UNAVAILABLE`` with exponential backoff (``retries`` times)."""
        delay = 0.2
        for attempt in range(self.settings.retries + 1):
            try:
                return call()
            except (flight.FlightUnavailableError, pa.ArrowIOError) as exc:
                if attempt == self.settings.retries or not is_retryable(exc):
                    raise
                logger.info("icefloe server unavailable (%s); retrying in %.1f s", clean(exc), delay)
                time.sleep(delay)
                delay = min(5.0, delay * 2)
        raise AssertionError("unreachable")

    def flight_info(self, descriptor: flight.FlightDescriptor, extra: list[tuple[bytes, bytes]] | None = None
                    ) -> flight.FlightInfo:
        return self.retrying(lambda: self.flight.get_flight_info(descriptor, self.options(extra)))

    def batches(self, ticket: bytes) -> Iterator[pa.RecordBatch]:
        """The record batches of one endpoint (the DoGet is retried only before any batch arrived)."""
        reader = self.retrying(lambda: self.flight.do_get(flight.Ticket(ticket), self.options()))
        for chunk in reader:
            if chunk.data is not None and chunk.data.num_rows:
                yield chunk.data

    def action(self, kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """A DoAction with a JSON body, answering the JSON results."""
        def call() -> list[dict[str, Any]]:
            results = self.flight.do_action(flight.Action(kind, json.dumps(body).encode()), self.options())
            return [json.loads(r.body.to_pybytes()) for r in results if r.body.size]
        return self.retrying(call)

    def close(self) -> None:
        self.flight.close()


def statement_descriptor(sql: str) -> flight.FlightDescriptor:
    """A ``CommandStatementQuery`` for ``sql``, Any-packed as the Flight SQL spec says."""
    return flight.FlightDescriptor.for_command(CommandStatementQuery(query=sql).pack())


def table_schema(client: Client, table: str) -> pa.Schema:
    """The table's Arrow schema (GetSchema of ``SELECT *``: nothing planned or read).

    Asked before anything that names the table's metadata tables (``ns."t$history"``), so that
    a typo'd table is reported as the user wrote it, with the server's "did you mean".

    Raises:
        TableNotFound: No such table.
        IcefloeSparkError: Any other refusal (permissions, a bad name), in the server's words.
    """
    sql = f"SELECT * FROM {quote_table(table)}"
    try:
        schema: pa.Schema = client.retrying(
            lambda: client.flight.get_schema(statement_descriptor(sql), client.options()).schema)
    except pa.ArrowKeyError as exc:  # NOT_FOUND
        raise TableNotFound(clean(exc)) from None
    except (flight.FlightError, pa.ArrowException) as exc:
        raise IcefloeSparkError(clean(exc)) from None
    return schema


def quote_identifier(name: str) -> str:
    """A SQL identifier in double quotes, embedded quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def quote_table(qualified: str) -> str:
    """``ns.t`` (or ``a.b.t``) as a quoted SQL table reference: the last dot separates the table,
    and a multi-level namespace is one schema name (``"a.b"."t"``), as the server names it."""
    namespace, _, table = qualified.rpartition(".")
    if not namespace or not table:
        raise IcefloeSparkError(f"option table must be namespace.table, got {qualified[:80]!r}")
    return quote_identifier(namespace) + "." + quote_identifier(table)
