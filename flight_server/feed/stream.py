"""One feed stream: subscribe, say hello, then replay and tail the commit log.

Each DoExchange call runs on its own gRPC thread and owns one ``Subscription``. The hub only
ever offers records to the subscription's bounded queue (it never waits), so a stream whose
client stops reading blocks nothing but its own thread: the queue overflows, the
subscription is marked lagging and later catches up from the durable log.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.flight as flight

from catalog.commit_log import CommitRecord
from catalog.subscriptions import Subscription
from flight_server import errors
from flight_server.feed.events import metadata_message
from flight_server.feed.request import FeedRequest

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

logger = logging.getLogger("icefloe.feed")

# Longest time a stream waits without checking for shutdown or a cancelled client.
POLL_SLICE_S = 0.2
# Most commit records handled per poll (and so per event batch).
POLL_LIMIT = 512


class ClientGone(Exception):
    """Writing to the client failed: it cancelled or disconnected."""


class FeedStream:
    """Base class for a feed stream; subclasses turn commit records into messages."""

    def __init__(
        self,
        server: IcefloeServer,
        context: flight.ServerCallContext,
        request: FeedRequest,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        self.server = server
        self.context = context
        self.request = request
        self.writer = writer
        self._schema: pa.Schema | None = None

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
            if metadata is None:
                self.writer.write_batch(batch)
            else:
                self.writer.write_with_metadata(batch, metadata)
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
        catalog = self.server.catalog
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
        heartbeat_s = self.request.heartbeat_ms / 1000.0
        last_sent = time.monotonic()
        while True:
            if self.server.stopping.is_set():
                raise errors.Unavailable(f"server is shutting down; resume after seq {subscription.last_seq}")
            if self.context.is_cancelled():
                return
            wait = min(POLL_SLICE_S, max(0.0, last_sent + heartbeat_s - time.monotonic()))
            records = subscription.poll(timeout=wait, limit=POLL_LIMIT)
            if records and self.handle(records):
                last_sent = time.monotonic()
            elif time.monotonic() - last_sent >= heartbeat_s:
                # "head" is how far this stream has looked: every matching commit up to it has
                # been sent, so a client may resume after it even if it matched nothing.
                self.send_metadata("heartbeat", {"head": subscription.last_seq})
                last_sent = time.monotonic()
