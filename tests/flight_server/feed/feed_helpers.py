"""Helpers for feed tests: a DoExchange reader with timeouts, and commit producers."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from catalog.commit_log import CommitRecord
from flight_server.feed.fanout import FanOut, Sink

# Client channel options that make the server's writes block after about one message when
# the client stops reading (no flow-control window growth, tiny lookahead).
STALLING_CLIENT_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]


@dataclass
class Message:
    """One message from a feed: metadata (decoded JSON) and/or a record batch."""

    metadata: dict[str, Any] | None
    batch: pa.RecordBatch | None

    @property
    def kind(self) -> str:
        if self.batch is not None:
            return "batch"
        assert self.metadata is not None
        return next(iter(self.metadata))


@dataclass
class FeedReader:
    """Reads a DoExchange feed on a background thread so tests can wait with timeouts."""

    location: str
    request: dict[str, Any]
    generic_options: Sequence[tuple[str, Any]] = ()
    read: bool = True  # False: open the stream but do not read until resume() is called
    headers: Sequence[tuple[bytes, bytes]] = ()  # call headers, e.g. a bearer token
    messages: queue.Queue[Message | BaseException] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.client = flight.FlightClient(self.location, generic_options=list(self.generic_options))
        descriptor = flight.FlightDescriptor.for_command(json.dumps(self.request).encode())
        options = flight.FlightCallOptions(headers=list(self.headers))
        self.writer, self.reader = self.client.do_exchange(descriptor, options)
        self.writer.done_writing()
        self._go = threading.Event()
        if self.read:
            self._go.set()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def resume(self) -> None:
        self._go.set()

    def _pump(self) -> None:
        self._go.wait()
        try:
            while True:
                chunk = self.reader.read_chunk()
                meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else None
                self.messages.put(Message(meta, chunk.data))
        except StopIteration:
            self.messages.put(StopIteration())
        except BaseException as exc:  # handed to the test thread
            self.messages.put(exc)

    def next(self, timeout: float = 10.0) -> Message:
        item = self.messages.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def error(self, timeout: float = 10.0) -> BaseException:
        """Read until the stream fails; return the exception."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(item, BaseException):
                return item

    def events(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Read until ``count`` events (rows of event batches) arrived; skip metadata."""
        deadline = time.monotonic() + timeout
        out: list[dict[str, Any]] = []
        while len(out) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"got {len(out)} of {count} events: {[e['seq'] for e in out]}")
            try:
                msg = self.next(timeout=remaining)
            except queue.Empty:
                continue
            if msg.batch is not None:
                out.extend(msg.batch.to_pylist())
        return out

    def wait_for(self, kind: str, timeout: float = 10.0) -> Message:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next(timeout=max(0.01, deadline - time.monotonic()))
            if msg.kind == kind:
                return msg

    def close(self) -> None:
        self._go.set()
        for step in (self.reader.cancel, self.writer.close):
            try:
                step()
            except Exception:  # closing a cancelled call reports the cancellation
                pass
        self.client.close()
        self._thread.join(5)

    def __enter__(self) -> FeedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingStream:
    """Records delivered seqs; ``gate`` (when cleared) blocks deliveries like a stalled client."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.seqs: list[int] = []
        self.heartbeats: list[int] = []
        # (started, returned) of each heartbeat write, by time.monotonic().
        self.heartbeat_times: list[tuple[float, float]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()
        self.delay_s = delay_s

    def deliver(self, records: list[CommitRecord], heartbeat: bool, head: int) -> bool:
        started = time.monotonic()
        if not self.gate.is_set():
            self.blocked.set()
            self.gate.wait(30)
        time.sleep(self.delay_s)
        self.seqs.extend(r.seq for r in records)
        if not records and heartbeat:
            self.heartbeats.append(head)
            self.heartbeat_times.append((started, time.monotonic()))
        return bool(records) or heartbeat



def attach_stuck(fanout: FanOut, head: int, **options: Any) -> tuple[RecordingStream, Sink]:
    """Attach a stream whose writes block (like a client that stopped reading) until its
    ``gate`` is set; ``options`` go to ``FanOut.attach``."""
    stream = RecordingStream()
    stream.gate.clear()
    sink = fanout.attach(stream, head, **{"on_stall": lambda: None, **options})
    assert sink is not None
    return stream, sink


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def stalled_and_live(location: str, heartbeat_ms: int | None = None) -> tuple[FeedReader, FeedReader]:
    """Two commits.v1 subscribers from now on: one that does not read (until ``resume``) and
    one that does; returns once the live one has its hello."""
    request: dict[str, Any] = {"feed": "commits.v1", "after": "latest"}
    if heartbeat_ms is not None:
        request["heartbeat_ms"] = heartbeat_ms
    stalled = FeedReader(location, request, generic_options=STALLING_CLIENT_OPTIONS, read=False)
    live = FeedReader(location, request)
    try:
        live.wait_for("hello")
    except BaseException:
        stalled.close()
        live.close()
        raise
    return stalled, live


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
