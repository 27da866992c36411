"""One feed stream: subscribe, say hello, then replay and tail the commit log.

Each DoExchange call runs on its own gRPC thread and owns one ``Subscription``. The hub only
ever offers records to the subscription's bounded queue (it never waits), so a stream whose
client stops reading blocks nothing but its own thread: the queue overflows, the
subscription is marked lagging and later catches up from the durable log.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

from catalog import RocksCatalog
from catalog.commit_log import CommitRecord
from catalog.subscriptions import Subscription
from flight_server import errors
from flight_server.feed.events import metadata_message
from flight_server.feed.fanout import FanOut
from flight_server.feed.request import FeedRequest
from flight_server.message_size import sliced
from flight_server.observability.metrics import Metrics

logger = logging.getLogger("icefloe.feed")

# Longest time a stream waits without checking for shutdown or a cancelled client.
POLL_SLICE_S = 0.2
# Most commit records handled per poll (and so per event batch).
POLL_LIMIT = 512
# How long a stream the fan-out handed back is tailed by its own thread before re-attaching.
REATTACH_DELAY_S = 1.0


class ClientGone(Exception):
    """Writing to the client failed: it cancelled or disconnected."""


@dataclass(frozen=True)
class FeedDeps:
    """What feed streams use of the server: the catalog they read, its stopping flag, metrics."""

    catalog: RocksCatalog
    stopping: threading.Event
    metrics: Metrics


class FeedStream:
    """Base class for a feed stream; subclasses turn commit records into messages."""

    def __init__(
        self,
        deps: FeedDeps,
        context: flight.ServerCallContext,
        request: FeedRequest,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        self.deps = deps
        self.context = context
        self.request = request
        self.writer = writer
        self._schema: pa.Schema | None = None
        # Streams that can be written by the shared fan-out workers once caught up.
        self.fanout: FanOut | None = None
        self.heartbeat_s = request.heartbeat_ms / 1000.0
        # Whether the records being handled were published live (the queue, the fan-out) or
        # read from the durable log (a replay from ``after``, a catch-up): metrics keep the
        # two lags apart, since a replay's "lag" is the age of history, not a delay.
        self.delivering_live = True
        # The head when the stream said hello: commits up to it are history the client asked
        # for with ``after``, a replay however they reach it (the fan-out's recent records too).
        self.replay_until = 0

    # -- writing ----------------------------------------------------------------------------

    def send_metadata(self, kind: str, body: dict[str, object]) -> None:
        try:
            self.writer.write_metadata(metadata_message(kind, body))
        except (flight.FlightError, pa.ArrowException) as exc:
            raise ClientGone(str(exc)) from None

    def send_batch(self, batch: pa.RecordBatch, metadata: bytes | None = None) -> None:
        try:
            if self._schema is None:
                self.writer.begin(batch.schema)
                self._schema = batch.schema
            # Cut to sizes a gRPC client accepts; the metadata (a commit's completion) goes
            # with the last piece, so it still follows every row it describes.
            pieces = list(sliced(batch))
            for piece in pieces[:-1]:
                self.writer.write_batch(piece)
            if metadata is None:
                self.writer.write_batch(pieces[-1])
            else:
                self.writer.write_with_metadata(pieces[-1], metadata)
        except (flight.FlightError, pa.ArrowException) as exc:
            raise ClientGone(str(exc)) from None

    @property
    def begun(self) -> bool:
        return self._schema is not None

    # -- the stream --------------------------------------------------------------------------

    def handle(self, records: list[CommitRecord]) -> bool:
        """Send whatever ``records`` mean for this feed; return whether anything was sent."""
        raise NotImplementedError

    def run(self) -> None:
        catalog = self.deps.catalog
        log = catalog.log
        after = self.request.after
        # Register before reading the log: anything landing from now on reaches the queue, and
        # anything that landed before is read from the log; sequence numbers dedupe the seam.
        subscription = catalog.hub.subscribe(after if isinstance(after, int) else 0)
        with subscription:
            log_start, head = log.log_start(), log.head()
            # Named cursors resolve against what hello reports, so "latest" means "after
            # hello's head" exactly.
            if after == "earliest":
                after = log_start - 1
            elif after == "latest":
                after = head
            assert isinstance(after, int)
            subscription.last_seq = after
            self.replay_until = head
            if after < log_start - 1:
                raise errors.OutOfRange(f"cursor expired: log starts at {log_start}")
            if after > head:
                raise errors.OutOfRange(f"cursor {after} is ahead of the log head {head}; was the warehouse replaced?")
            try:
                self.send_metadata("hello", {"log_start": log_start, "head": head})
                self._loop(subscription)
            except ClientGone as exc:
                logger.debug("feed client went away: %s", exc)

    def _loop(self, subscription: Subscription) -> None:
        last_sent = time.monotonic()
        attach_after = 0.0
        until = self.request.until
        while True:
            if until is not None and subscription.last_seq >= until:
                return  # every commit up to ``until`` was sent: the stream ends cleanly
            if self.deps.stopping.is_set():
                raise errors.Unavailable(f"server is shutting down; resume after seq {subscription.last_seq}")
            if self.context.is_cancelled():
                return
            # A bounded stream stays on its own thread: the fan-out would write past ``until``.
            if self.fanout is not None and until is None and time.monotonic() >= attach_after:
                outcome = self._live(self.fanout, subscription)
                if outcome is None:
                    return
                if outcome:
                    # It stalled in a write or fell behind: tail from here with the log and
                    # this thread for a while before handing it to the workers again.
                    attach_after = time.monotonic() + REATTACH_DELAY_S
                    last_sent = time.monotonic()
                    continue
                # Not caught up yet: read the log below, then try again.
            records = subscription.poll(timeout=self._wait_s(last_sent), limit=POLL_LIMIT)
            if until is not None:
                records = [r for r in records if r.seq <= until]
            self.delivering_live = not subscription.last_poll_from_log
            if records and self.handle(records):
                last_sent = time.monotonic()
            elif time.monotonic() - last_sent >= self.heartbeat_s:
                # "head" is how far this stream has looked: every matching commit up to it has
                # been sent, so a client may resume after it even if it matched nothing.
                self.send_metadata("heartbeat", {"head": subscription.last_seq})
                last_sent = time.monotonic()

    def _wait_s(self, last_sent: float) -> float:
        """How long to wait before the next check: until a heartbeat is due, at most a slice."""
        return min(POLL_SLICE_S, max(0.0, last_sent + self.heartbeat_s - time.monotonic()))

    def _live(self, fanout: FanOut, subscription: Subscription) -> bool | None:
        """Let the fan-out workers write this stream while it keeps up.

        Returns None when the stream ended (client gone), True when the fan-out handed it
        back (stalled or fell behind) and False when it could not attach (not caught up).
        """
        sink = fanout.attach(
            self,
            subscription.last_seq,
            on_stall=subscription.mark_lagging,
            heartbeat_s=self.heartbeat_s,
            ended=self._ended,
        )
        if sink is None:
            return False
        subscription.pause()
        try:
            # The fan-out's timer sends the heartbeats and notices a cancelled client or a
            # stopping server (``_ended``): this thread sleeps until the stream is let go.
            sink.released.wait()
        finally:
            fanout.detach(sink)  # on any way out, no worker may still be writing
        # Released, so no worker is writing: ``last_seq`` is final.
        if self.deps.stopping.is_set():
            raise errors.Unavailable(f"server is shutting down; resume after seq {sink.last_seq}")
        if self.context.is_cancelled():
            return None
        if sink.error is not None:
            # ClientGone ends the stream quietly; anything else is a bug and reaches the
            # RPC boundary (errors.guard) like any other.
            raise sink.error
        subscription.resume(sink.last_seq)
        return True

    def _ended(self) -> bool:
        """Asked by the fan-out's timer while attached: should this stream stop?"""
        return self.deps.stopping.is_set() or self.context.is_cancelled()

    # -- fan-out workers ---------------------------------------------------------------------

    def deliver(self, records: list[CommitRecord], heartbeat: bool, head: int) -> bool:
        """Called by a fan-out worker while this stream is attached (see ``fanout``)."""
        self.delivering_live = True
        if records and self.handle(records):
            return True
        if heartbeat:
            self.send_metadata("heartbeat", {"head": head})
            return True
        return False
