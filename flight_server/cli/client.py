"""A small Python client for the commit feed that resumes by itself after a disconnect.

    from flight_server.cli.client import subscribe

    for event in subscribe("grpc://127.0.0.1:31337", after="earliest", tables=["sales.*"]):
        print(event.seq, event.operation, event.qualified_name)

The client keeps the last sequence number it has yielded (or that a heartbeat reported as
covered) and, when the stream breaks (server restart, network error, a stalled connection),
reconnects with ``after`` = that cursor, so every matching commit is yielded exactly once
and in order. Errors that retrying cannot fix (an expired cursor, a malformed subscription,
bad credentials) are raised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

logger = logging.getLogger("icefloe.client")

DEFAULT_LOCATION = "grpc://127.0.0.1:31337"


class FeedError(Exception):
    """The feed refused the subscription; retrying the same request cannot succeed."""


class FeedCursorExpired(FeedError):
    """The cursor is older than the server's retained commit log."""


@dataclass(frozen=True)
class CommitEvent:
    """One commit, with the columns of the ``commits.v1`` event schema."""

    seq: int
    committed_at: datetime
    namespace: str
    table: str
    table_uuid: str | None
    operation: str
    snapshot_id: int | None
    parent_snapshot_id: int | None
    added_rows: int | None
    deleted_rows: int | None
    added_files: int | None
    metadata_location: str | None
    principal: str | None
    data_change: bool | None = None
    removed_files: int | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.table}"

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["committed_at"] = self.committed_at.isoformat()
        return body


def subscribe(
    location: str = DEFAULT_LOCATION,
    after: int | str = "latest",
    tables: Sequence[str] | None = None,
    heartbeat_ms: int = 1000,
    *,
    reconnect: bool = True,
    max_backoff_s: float = 5.0,
    stall_timeout_s: float | None = None,
    headers: Sequence[tuple[bytes, bytes]] | None = None,
    stop: threading.Event | None = None,
    tls_root_certs: bytes | None = None,
) -> Iterator[CommitEvent]:
    """Yield every matching commit after ``after``, following the feed live.

    Args:
        location: Server location, e.g. ``grpc://127.0.0.1:31337``.
        after: A commit sequence number, ``"earliest"`` or ``"latest"``.
        tables: ``ns.t`` names or ``ns.*`` globs; None for every table.
        heartbeat_ms: How often the server sends heartbeats when there is nothing to send.
        reconnect: Reconnect (from the last seq) when the stream breaks; otherwise raise.
        max_backoff_s: Longest pause between reconnection attempts.
        stall_timeout_s: Reconnect if no message (event or heartbeat) arrives for this long
            while waiting; defaults to five heartbeat intervals plus two seconds.
        headers: Extra call headers (e.g. ``(b"authorization", b"Bearer ...")``).
        stop: When set (from another thread), the generator returns promptly.
        tls_root_certs: PEM bytes of the CA that signed the server's certificate (grpc+tls).

    Raises:
        FeedCursorExpired: ``after`` (or the cursor reached since) is older than the log.
        FeedError: The server refused the subscription (malformed, unknown table, auth).
    """
    cursor: int | str = after
    backoff = 0.1
    failures = 0  # attempts in a row that received nothing
    stall = stall_timeout_s if stall_timeout_s is not None else 5 * heartbeat_ms / 1000 + 2.0
    while stop is None or not stop.is_set():
        request: dict[str, Any] = {"feed": "commits.v1", "after": cursor, "heartbeat_ms": heartbeat_ms}
        if tables is not None:
            request["tables"] = list(tables)
        connection = _Connection(location, request, headers, stall, stop, tls_root_certs)
        try:
            for kind, payload in connection.messages():
                backoff = 0.1  # the connection works; start over if it breaks later
                failures = -1
                if kind == "hello":
                    if cursor == "earliest":
                        cursor = int(payload["log_start"]) - 1
                    elif cursor == "latest":
                        cursor = int(payload["head"])
                elif kind == "heartbeat":
                    head = int(payload["head"])
                    if isinstance(cursor, int) and head > cursor:
                        cursor = head  # nothing matched up to head: resume after it
                elif kind == "batch":
                    for event in events_of(payload):
                        if isinstance(cursor, int) and event.seq <= cursor:
                            continue  # already yielded before a reconnect
                        yield event
                        cursor = event.seq
            error: Exception = ConnectionError("the server ended the feed stream")
        except pa.ArrowException as exc:  # FlightError and the Arrow-status errors
            _raise_if_final(exc)
            error = exc
        finally:
            connection.close()
        if stop is not None and stop.is_set():
            return
        if not reconnect:
            raise ConnectionError(f"feed stream broke: {error}") from error
        failures += 1
        if failures == 3:  # said once: a wrong address or a server that is down
            logger.warning("cannot reach the feed at %s (%s); still retrying", location, _first_line(str(error)))
        logger.info("feed stream broke (%s); reconnecting after seq %s in %.1f s", error, cursor, backoff)
        if stop is not None:
            if stop.wait(backoff):
                return
        else:
            time.sleep(backoff)
        backoff = min(max_backoff_s, backoff * 2)


def feed_head(
    location: str,
    headers: Sequence[tuple[bytes, bytes]] | None = None,
    tls_root_certs: bytes | None = None,
    timeout_s: float = 30.0,
) -> int:
    """The seq of the latest commit, from the feed's hello (one short DoExchange).

    Raises:
        FeedError: The server refused the call (auth).
        pyarrow.ArrowException: The server cannot be reached.
    """
    request = {"feed": "commits.v1", "after": "latest"}
    messages = feed_messages(location, request, headers=headers, stall_timeout_s=timeout_s,
                             tls_root_certs=tls_root_certs)
    with contextlib.closing(messages):  # ends the call now, not when the generator is collected
        for kind, payload in messages:
            if kind == "hello":
                return int(payload["head"])
    raise ConnectionError("the feed sent no hello")


def feed_messages(
    location: str,
    request: dict[str, Any],
    *,
    headers: Sequence[tuple[bytes, bytes]] | None = None,
    stall_timeout_s: float = 7.0,
    stop: threading.Event | None = None,
    tls_root_certs: bytes | None = None,
) -> Generator[tuple[str, Any], None, None]:
    """One feed connection's messages, for clients that need the hello and heartbeats too (the
    Spark source answers offsets from the head): ``("hello" | "heartbeat", dict)`` and
    ``("batch", RecordBatch)``. No reconnection; the call is cancelled when it stalls or ``stop``
    is set (the iterator then ends).

    Args:
        location: Server location.
        request: The subscription (``{"feed": "commits.v1", "after": ..., ...}``).
        headers: Extra call headers.
        stall_timeout_s: Cancel when no message arrives for this long.
        stop: When set, the call is cancelled.
        tls_root_certs: PEM bytes of the server's CA.

    Raises:
        FeedCursorExpired: ``after`` is older than the retained log.
        FeedError: The server refused the subscription.
        pyarrow.ArrowException: The stream broke (retrying may help).
    """
    connection = _Connection(location, request, headers, stall_timeout_s, stop, tls_root_certs)
    try:
        yield from connection.messages()
    except pa.ArrowException as exc:
        _raise_if_final(exc)
        raise
    finally:
        connection.close()


def _raise_if_final(exc: pa.ArrowException) -> None:
    text = str(exc)
    if "cursor expired" in text:
        raise FeedCursorExpired(_first_line(text)) from exc
    if isinstance(exc, (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError)):
        raise FeedError(_first_line(text)) from exc
    if isinstance(exc, (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError)):
        raise FeedError(_first_line(text)) from exc


def _first_line(text: str) -> str:
    return text.split(". Detail:")[0].split(". gRPC client debug context")[0]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _pylist(column: pa.Array) -> list[Any]:
    """A column's Python values. Zoned timestamps are converted here: pyarrow converts them
    through pandas when pandas is installed, importing it (seconds) into a client that
    otherwise needs none of it."""
    kind = column.type
    if not (pa.types.is_timestamp(kind) and kind.tz is not None):
        return list(column.to_pylist())
    if kind.tz.upper() not in ("UTC", "+00:00", "Z", "ETC/UTC"):
        return list(column.to_pylist())  # (the feed's schema is UTC; any other zone the general way)
    ticks = column.cast(pa.int64()).to_pylist()
    if kind.unit == "ns":
        return [None if t is None else _EPOCH + timedelta(microseconds=t // 1000) for t in ticks]
    per = _MICROS_PER[kind.unit]
    return [None if t is None else _EPOCH + timedelta(microseconds=t * per) for t in ticks]


def events_of(batch: pa.RecordBatch) -> Iterator[CommitEvent]:
    """The commit events of one ``commits.v1`` record batch."""
    known = CommitEvent.__dataclass_fields__
    # By name: a newer server's extra columns are skipped, not an error.
    columns = {name: _pylist(column) for name, column in zip(batch.schema.names, batch.columns, strict=True)
               if name in known}
    for i in range(batch.num_rows):
        yield CommitEvent(**{name: values[i] for name, values in columns.items()})


class _Connection:
    """One DoExchange call; a watchdog cancels it when it stalls or ``stop`` is set."""

    def __init__(
        self,
        location: str,
        request: dict[str, Any],
        headers: Sequence[tuple[bytes, bytes]] | None,
        stall_timeout_s: float,
        stop: threading.Event | None,
        tls_root_certs: bytes | None = None,
    ) -> None:
        self._location = location
        self._tls_root_certs = tls_root_certs
        self._request = request
        self._options = flight.FlightCallOptions(headers=list(headers) if headers else None)
        self._stall = stall_timeout_s
        self._stop = stop
        self._client: flight.FlightClient | None = None
        self._reader: flight.FlightStreamReader | None = None
        self._writer: flight.FlightStreamWriter | None = None
        self._waiting_since: float | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def messages(self) -> Iterator[tuple[str, Any]]:
        """Yield ("hello" | "heartbeat" | "commit", dict) and ("batch", RecordBatch)."""
        self._client = flight.connect(self._location, tls_root_certs=self._tls_root_certs)
        descriptor = flight.FlightDescriptor.for_command(json.dumps(self._request).encode("utf-8"))
        writer, reader = self._client.do_exchange(descriptor, self._options)
        self._reader, self._writer = reader, writer
        writer.done_writing()  # the feed reads nothing from the client
        threading.Thread(target=self._watch, name="icefloe-feed-watchdog", daemon=True).start()
        while True:
            self._waiting_since = time.monotonic()
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            finally:
                self._waiting_since = None
            if chunk.app_metadata is not None:
                for kind, body in json.loads(chunk.app_metadata.to_pybytes()).items():
                    if chunk.data is None:
                        yield kind, body
            if chunk.data is not None:
                yield "batch", chunk.data

    def _watch(self) -> None:
        while not self._closed.wait(0.1):
            since = self._waiting_since
            stalled = since is not None and time.monotonic() - since > self._stall
            if stalled or (self._stop is not None and self._stop.is_set()):
                if stalled:
                    logger.warning("no message from the feed for %.1f s; reconnecting", self._stall)
                self._cancel()
                return

    def _cancel(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.cancel()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._reader is not None and self._writer is not None:
                for step in (self._reader.cancel, self._writer.close):
                    try:
                        step()
                    except (flight.FlightError, pa.ArrowException):
                        pass  # closing a cancelled call reports the cancellation
                self._reader = self._writer = None
            if self._client is not None:
                self._client.close()
                self._client = None


def print_events(
    location: str,
    after: int | str,
    tables: Sequence[str] | None,
    heartbeat_ms: int,
    headers: Sequence[tuple[bytes, bytes]] | None = None,
    tls_root_certs: bytes | None = None,
) -> None:
    """Follow the feed and print one JSON line per event (``icefloe subscribe``)."""
    import sys

    for event in subscribe(location, after=after, tables=tables, heartbeat_ms=heartbeat_ms, headers=headers,
                           tls_root_certs=tls_root_certs):
        sys.stdout.write(json.dumps(event.to_json()) + "\n")
        sys.stdout.flush()


def parse_after(text: str) -> int | str:
    """``--after`` value: a non-negative seq, ``earliest`` or ``latest``."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--after must be a commit sequence number, 'earliest' or 'latest', not {text!r}") from None
    if value < 0:
        raise ValueError("--after must be >= 0")
    return value
