"""Flight SQL sessions: the ``catalog`` / ``schema`` options a client set, keyed by its bearer token or cookie.

A session is found by the caller's bearer token (``authorization: Bearer ...``) when there is
one, else by the ``arrow_flight_session_id`` cookie (the name Arrow's own session middleware
uses). Cookie-less callers are offered a cookie on every response; state is kept only once
they set an option. Sessions that go idle expire, and the number kept is capped, so clients
that vanish leave nothing behind.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow.flight as flight

from flight_server.security.headers import MIDDLEWARE_KEY as HEADERS_MIDDLEWARE_KEY
from flight_server.security.headers import HeadersMiddleware
from flight_server.security.tokens import session_identity

COOKIE = "arrow_flight_session_id"
# The session rides on the call's headers middleware (one Python middleware per call, not two:
# see ``HeadersMiddleware``), so both are found under its key.
MIDDLEWARE_KEY = HEADERS_MIDDLEWARE_KEY


@dataclass
class Session:
    options: dict[str, Any] = field(default_factory=dict)
    # The sealed id of the transaction SQL ``BEGIN`` opened in this session (flight_server.transactions).
    transaction: bytes | None = None
    last_used: float = field(default_factory=time.monotonic)


class SessionMiddleware(HeadersMiddleware):
    """The call's headers, plus who is calling (token or cookie) and whether a cookie must be
    sent back."""

    def __init__(self, token: str | None, cookie: str | None, headers: dict[str, list[Any]] | None = None) -> None:
        super().__init__(headers or {})
        self.token = token
        self.cookie = cookie
        self.new_cookie: str | None = None

    def key(self) -> str | None:
        if self.token:
            # Keyed by what survives token renewals (auth sends fresh tokens on long connections).
            return "bearer:" + _token_key(self.token)
        cookie = self.new_cookie or self.cookie
        return "cookie:" + cookie if cookie else None

    def presented_key(self) -> str | None:
        """The session key the caller itself sent (bearer token or cookie), None when it sent
        neither: a cookie only offered on this call's response proves nothing yet."""
        if self.token or self.cookie:
            return self.key() if self.token else "cookie:" + str(self.cookie)
        return None

    def sending_headers(self) -> dict[str, str]:
        if self.new_cookie:
            return {"set-cookie": f"{COOKIE}={self.new_cookie}"}
        return {}


@functools.lru_cache(maxsize=1024)
def _token_key(token: str) -> str:
    """A bearer token's session key (a client sends the same token on every call)."""
    return hashlib.sha256(session_identity(token).encode()).hexdigest()


class SessionMiddlewareFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> SessionMiddleware:
        # gRPC hands metadata keys lower-cased.
        token = None
        for value in headers.get("authorization", ()):
            value = value.decode() if isinstance(value, bytes) else value
            if value[:7].lower() == "bearer ":
                token = value[7:].strip()
        cookie = None
        for value in headers.get("cookie", ()):
            value = value.decode() if isinstance(value, bytes) else value
            for part in value.split(";"):
                name, _, val = part.strip().partition("=")
                if name == COOKIE and val:
                    cookie = val
        mw = SessionMiddleware(token, cookie, headers)
        if token is None and cookie is None:
            # Offer a session id up front: Arrow sends response headers before the handler can
            # decide it needs one. No session state exists until the client sets an option.
            mw.new_cookie = secrets.token_urlsafe(24)
        return mw


class SessionStore:
    def __init__(self, idle_timeout_s: float = 3600.0, max_sessions: int = 10_000) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _middleware(context: flight.ServerCallContext) -> SessionMiddleware | None:
        mw = context.get_middleware(MIDDLEWARE_KEY)
        return mw if isinstance(mw, SessionMiddleware) else None

    def get(self, context: flight.ServerCallContext, create: bool = False) -> Session | None:
        mw = self._middleware(context)
        if mw is None:
            return None
        key = mw.key()
        if key is None:
            if not create:
                return None
            mw.new_cookie = secrets.token_urlsafe(24)
            key = mw.key()
            assert key is not None
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            session = self._sessions.get(key)
            if session is None:
                if not create:
                    return None
                session = self._sessions[key] = Session()
            self._sessions.move_to_end(key)
            session.last_used = now
            return session

    def presented_key(self, context: flight.ServerCallContext) -> str | None:
        """The session key this call carried (see ``SessionMiddleware.presented_key``)."""
        mw = self._middleware(context)
        return mw.presented_key() if mw is not None else None

    def key(self, context: flight.ServerCallContext) -> str | None:
        """The key of the caller's session: the one it carried, or the one offered to it."""
        mw = self._middleware(context)
        return mw.key() if mw is not None else None

    def close(self, context: flight.ServerCallContext) -> bool:
        mw = self._middleware(context)
        key = mw.key() if mw else None
        with self._lock:
            return key is not None and self._sessions.pop(key, None) is not None

    def _expire(self, now: float) -> None:
        while self._sessions:
            key, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < self.idle_timeout_s and len(self._sessions) <= self.max_sessions:
                break
            del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)
