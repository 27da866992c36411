"""Session store bounds: idle sessions expire and the number kept is capped (no leaks)."""

from __future__ import annotations

import time
from typing import Any

from flight_server.flightsql.sessions import MIDDLEWARE_KEY, SessionMiddleware, SessionStore


class Call:
    """The one thing the store asks of a pyarrow ServerCallContext: its middleware."""

    def __init__(self, middleware: SessionMiddleware) -> None:
        self.middleware = middleware

    def get_middleware(self, key: str) -> Any:
        return self.middleware if key == MIDDLEWARE_KEY else None


def test_idle_sessions_expire() -> None:
    store = SessionStore(idle_timeout_s=0.2)
    call = Call(SessionMiddleware(token="t1", cookie=None))
    store.get(call, create=True).options["schema"] = "sales"  # type: ignore[union-attr, arg-type]
    assert store.get(call).options == {"schema": "sales"}  # type: ignore[union-attr, arg-type]
    time.sleep(0.3)
    assert store.get(call) is None  # type: ignore[arg-type]
    assert len(store) == 0


def test_session_count_is_capped() -> None:
    store = SessionStore(max_sessions=10)
    for i in range(50):
        store.get(Call(SessionMiddleware(token=f"t{i}", cookie=None)), create=True)  # type: ignore[arg-type]
    assert len(store) <= 11
    assert store.get(Call(SessionMiddleware(token="t49", cookie=None))) is not None  # type: ignore[arg-type]
    assert store.get(Call(SessionMiddleware(token="t0", cookie=None))) is None  # type: ignore[arg-type]


def test_cookie_less_callers_are_offered_a_cookie_but_get_no_state() -> None:
    store = SessionStore()
    call = Call(SessionMiddleware(token=None, cookie=None))
    assert store.get(call) is None  # type: ignore[arg-type]
    assert len(store) == 0
