"""Flight SQL session commands (``SetSessionOptions`` / ``GetSessionOptions``) and what a
session says to the other handlers: its current schema and its split-scan options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow.flight as flight

from flight_server import errors
from flight_server.engine import CATALOG_NAME, split_namespace
from flight_server.engine.splits import DEFAULT_MAX_PARTITIONS, DEFAULT_TARGET_BYTES
from flight_server.engine.sql_text import DEFAULT_SCHEMA
from flight_server.flightsql import protocol as p
from flight_server.flightsql.sessions import SessionStore
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer
from flight_server.security.headers import call_headers

# Split scans (see engine.splits): a session option or a call header of the same name.
SCAN_TARGET_BYTES = "icefloe.scan.target-partition-bytes"
SCAN_MAX_PARTITIONS = "icefloe.scan.max-partitions"
SESSION_OPTIONS = ("catalog", "schema", SCAN_TARGET_BYTES, SCAN_MAX_PARTITIONS)


class SessionHandler:
    """Session options, checked (``schema`` must name a namespace that exists)."""

    def __init__(self, sessions: SessionStore, authorizer: Authorizer,
                 namespace_exists: Callable[[tuple[str, ...]], bool]) -> None:
        self.sessions = sessions
        self.authorizer = authorizer
        self.namespace_exists = namespace_exists

    def default_schema(self, context: flight.ServerCallContext) -> tuple[str, ...]:
        """The session's current schema: unqualified reads, writes and ingest resolve there.

        Every session has one: the ``schema`` option it set, else ``default`` (which the server
        creates at start and refuses to drop).
        """
        session = self.sessions.get(context)
        if session is None or not session.options.get("schema"):
            return split_namespace(DEFAULT_SCHEMA)
        return split_namespace(str(session.options["schema"]))

    def scan_options(self, context: flight.ServerCallContext) -> tuple[int, int]:
        """(target bytes per endpoint, most endpoints): a call header wins over the session
        option of the same name, which wins over the default."""
        session = self.sessions.get(context)
        options = session.options if session is not None else {}

        def pick(key: str, default: int) -> int:
            values = call_headers(context, key)
            raw = values[-1] if values else options.get(key)
            if raw is None:
                return default
            value = positive_int(raw)
            if value is None:
                raise errors.InvalidArgument(f"{key} must be a whole number >= 1, got {str(raw)[:40]!r}")
            return value

        return pick(SCAN_TARGET_BYTES, DEFAULT_TARGET_BYTES), pick(SCAN_MAX_PARTITIONS, DEFAULT_MAX_PARTITIONS)

    def set_options(self, context: flight.ServerCallContext, req: p.SetSessionOptionsRequest) -> bytes:
        self.authorizer.authorize(context, roles.action_role("SetSessionOptions"))
        session = self.sessions.get(context, create=True)
        if session is None:  # the server was built without the session middleware
            raise errors.Unimplemented("session options are not available on this server")
        errs = []
        for entry in req.session_options:
            value = entry.value.python_value() if entry.value else None
            code = self._option_error(entry.key, value)
            if code:
                errs.append(p.SetSessionOptionsErrorEntry(entry.key, p.SetSessionOptionsError(code)))
            elif value is None:
                session.options.pop(entry.key, None)
            else:
                session.options[entry.key] = value
        return p.SetSessionOptionsResult(errors=errs).encode()

    def _option_error(self, key: str, value: Any) -> int:
        """0 when the option may be set, else the SetSessionOptionsResult ErrorValue."""
        if key not in SESSION_OPTIONS:
            return 1  # INVALID_NAME
        if value is None:
            return 0
        if key in (SCAN_TARGET_BYTES, SCAN_MAX_PARTITIONS):
            return 0 if positive_int(value) is not None else 2  # INVALID_VALUE
        if not isinstance(value, str):
            return 2  # INVALID_VALUE
        if key == "catalog":
            return 0 if value == CATALOG_NAME else 2
        return 0 if self.namespace_exists(split_namespace(value)) else 2

    def get_options(self, context: flight.ServerCallContext) -> bytes:
        self.authorizer.authorize(context, roles.action_role("GetSessionOptions"))
        session = self.sessions.get(context)
        options: dict[str, Any] = {"catalog": CATALOG_NAME, "schema": DEFAULT_SCHEMA}
        if session is not None:
            options.update(session.options)
        entries = [
            p.SessionOptionEntry(k, p.SessionOptionValue(string_value=str(v))) for k, v in sorted(options.items())
        ]
        return p.GetSessionOptionsResult(entries).encode()


def positive_int(raw: Any) -> int | None:
    """A whole number >= 1 from a session option or header value (int or decimal text)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and raw.strip().isdigit() and len(raw.strip()) <= 19:
        value = int(raw.strip())
    else:
        return None
    return value if value >= 1 else None
