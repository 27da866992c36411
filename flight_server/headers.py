"""Call headers for handlers: pyarrow.flight exposes them only to server middleware.

``HeadersMiddlewareFactory`` keeps each call's text headers (lower-cased names) so that a
handler can read one with ``call_header(context, name)``.
"""

from __future__ import annotations

from typing import Any

import pyarrow.flight as flight

from flight_server import errors

MIDDLEWARE_KEY = "icefloe-headers"
IDEMPOTENCY_HEADER = "x-icefloe-idempotency-key"
# A pipe step (catalog.pipes.PipeCommit as JSON): checkpoint and lineage land with the append.
PIPE_HEADER = "x-icefloe-pipe"
# Two-phase appends: a DoPut with this header (the job id) stages its files, commits nothing.
STAGE_HEADER = "x-icefloe-stage"


class HeadersMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    def __init__(self, headers: dict[str, list[str]]) -> None:
        self.headers = headers


class HeadersMiddlewareFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def start_call(self, info: Any, headers: dict[str, Any]) -> HeadersMiddleware:
        text: dict[str, list[str]] = {}
        for name, values in headers.items():
            text[name.lower()] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
        return HeadersMiddleware(text)


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
