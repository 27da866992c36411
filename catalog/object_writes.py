"""Writes to an object store that end in bounded time.

pyarrow's S3 client applies its request timeout only on Windows and macOS: on Linux a PUT
whose answer never comes (a stalled store, a half-open connection) blocks its caller for good,
and with it the commit and the client waiting for an acknowledgement. So the step that makes
an object exist — closing its output stream (the single PUT, or the remaining parts and the
multipart completion) — runs on its own thread, and the writer waits at most
``close_deadline_s``: past it the commit fails with ``ObjectStoreTimeout`` (the client sees
UNAVAILABLE) before anything refers to the object. If the abandoned close succeeds later the
object is simply unreferenced, and orphan removal takes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from catalog.object_store import MAX_ATTEMPTS, REQUEST_TIMEOUT_S, ObjectStoreTimeout, within

__all__ = ["DeadlineStream", "ObjectStoreTimeout", "close_deadline_s", "close_within"]


def close_deadline_s(io_properties: Mapping[str, str]) -> float:
    """How long closing one object may take: every attempt its request timeout."""
    try:
        timeout = float(io_properties.get("s3.request-timeout") or REQUEST_TIMEOUT_S)
    except ValueError:
        timeout = REQUEST_TIMEOUT_S
    return timeout * MAX_ATTEMPTS


def close_within(stream: Any, deadline_s: float) -> None:
    """Close ``stream`` (uploading what it holds), waiting at most ``deadline_s`` seconds.

    Raises:
        ObjectStoreTimeout: The store did not answer in time (the close goes on unobserved).
        OSError: The close failed (the object store's own error, after its retries).
    """
    within(deadline_s, stream.close, "object-store-close")


class DeadlineStream:
    """An object-store output stream whose ``close`` ends within a deadline (``close_within``).

    ``raw`` is the native stream, for writers (Parquet) that should write to it directly.
    """

    def __init__(self, raw: Any, deadline_s: float, on_stored: Callable[[bytes], None] | None = None) -> None:
        self.raw = raw
        self._deadline_s = deadline_s
        # Told the object's bytes once it is stored (a small metadata file a reader will want
        # next: catalog.object_reads keeps it), so the bytes written are kept until then.
        self._on_stored = on_stored
        self._written: list[bytes] = []

    def write(self, data: bytes) -> int:
        if self._on_stored is not None:
            self._written.append(bytes(data))
        return int(self.raw.write(data))

    def tell(self) -> int:
        return int(self.raw.tell())

    @property
    def closed(self) -> bool:
        return bool(self.raw.closed)

    def close(self) -> None:
        if not self.raw.closed:
            close_within(self.raw, self._deadline_s)
            if self._on_stored is not None:
                self._on_stored(b"".join(self._written))
                self._on_stored, self._written = None, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def __enter__(self) -> DeadlineStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
