"""Call headers for handlers (pyarrow.flight exposes them only to server middleware), and
whether a call is still running.

``HeadersMiddlewareFactory`` keeps each call's text headers (lower-cased names) so that a
handler can read one with ``call_header(context, name)``.

The same per-call middleware knows when its call ended. pyarrow's ``ServerCallContext`` points
at the C++ call context, which is freed when the call ends; asking a freed one anything reads
freed memory and can crash the server. A thread that outlives a handler's return (the query
watchdog, asking whether the client cancelled while a result streams) must go through
``client_cancelled``, which consults the context only while the call runs. Whether a result's
reader is still alive says nothing about its call: a traceback can keep a failed stream's
reader in a reference cycle until the garbage collector runs, long after gRPC finished. What
must happen when a call ends whatever its objects do (a query's slot given back) is registered
with ``at_end``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pyarrow.flight as flight

from flight_server import errors

logger = logging.getLogger("icefloe.server")

MIDDLEWARE_KEY = "icefloe-headers"
IDEMPOTENCY_HEADER = "x-icefloe-idempotency-key"
# A pipe step (catalog.pipes.PipeCommit as JSON): checkpoint and lineage land with the append.
PIPE_HEADER = "x-icefloe-pipe"
# Two-phase appends: a DoPut with this header (the job id) stages its files, commits nothing.
STAGE_HEADER = "x-icefloe-stage"
# An append's own schema policy (match | evolve | strict), over the table's; see
# catalog.schema_policy (which, free of Flight imports, names the header itself).
SCHEMA_POLICY_HEADER = "x-icefloe-schema-policy"
SCHEMA_POLICIES = ("match", "evolve", "strict")


class HeadersMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    """One call's headers, and whether the call has ended.

    This is the server's one per-call Python middleware besides authentication (the Flight
    SQL sessions extend it rather than add their own): each Python middleware costs every RPC
    three calls from gRPC's threads into Python (``start_call``, ``sending_headers``,
    ``call_completed``), each taking the GIL, and a ``SELECT 1`` through ADBC is four RPCs.
    The headers are decoded only when a handler asks for one.
    """

    def __init__(self, headers: dict[str, list[Any]]) -> None:
        self._raw = headers
        self._text: dict[str, list[str]] | None = None
        self._lock = threading.Lock()
        self._ended = False
        self._at_end: dict[object, Callable[[], None]] = {}

    @property
    def headers(self) -> dict[str, list[str]]:
        """Every text header of the call (lower-cased names), decoded on first use."""
        if self._text is None:
            self._text = {name.lower(): [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                         for v in values] for name, values in self._raw.items()}
        return self._text

    def sending_headers(self) -> dict[str, str]:
        return {}

    def call_completed(self, exception: BaseException | None) -> None:
        # Flight calls this as the call finishes (a DoGet's stream is written and dropped by
        # then), while its C++ context still exists; once it returns, ``client_cancelled``
        # never touches that context again.
        with self._lock:
            self._ended = True
            if not self._at_end:  # the common case: nothing registered, or released already
                return
            callbacks, self._at_end = list(self._at_end.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing clean-up must not skip the others
                logger.exception("end of call: a clean-up failed")

    def at_end(self, key: object, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the call ends (at once if it has), unless ``forget(key)``
        is called first."""
        with self._lock:
            if not self._ended:
                self._at_end[key] = callback
                return
        callback()

    def forget(self, key: object) -> None:
        """Drop the end-of-call clean-up registered under ``key`` (it was done already)."""
        with self._lock:
            self._at_end.pop(key, None)

    def client_cancelled(self, context: flight.ServerCallContext) -> bool | None:
        """Whether the client cancelled this call; None once the call has ended (its context
        is gone, and nobody reads what it started any more)."""
        with self._lock:
            if self._ended:
                return None
            return bool(context.is_cancelled())


class HeadersMiddlewareFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def start_call(self, info: Any, headers: dict[str, Any]) -> HeadersMiddleware:
        return HeadersMiddleware(headers)


def call_of(context: Any) -> HeadersMiddleware | None:
    """The call middleware of ``context`` (None without a context, or outside a server that
    installs it). Only to be asked while the call runs, e.g. in its handler."""
    if context is None or not hasattr(context, "get_middleware"):
        return None
    middleware = context.get_middleware(MIDDLEWARE_KEY)
    return middleware if isinstance(middleware, HeadersMiddleware) else None


def call_headers(context: flight.ServerCallContext, name: str) -> list[str]:
    """Every value of header ``name`` sent with this call (empty when absent)."""
    middleware = context.get_middleware(MIDDLEWARE_KEY)
    if middleware is None:
        return []
    values: list[str] = middleware.headers.get(name.lower(), [])
    return values


def single_header(context: flight.ServerCallContext, name: str) -> str | None:
    """The value of header ``name`` (None when absent); one value, however often it is sent.

    Raises:
        errors.InvalidArgument: The header was sent several times with different values.
    """
    values = call_headers(context, name)
    if not values:
        return None
    if len(set(values)) > 1:
        raise errors.InvalidArgument(f"header {name} was sent more than once with different values")
    return values[0]
