"""FeedService: the DoExchange entry point for the commit and row feeds."""

from __future__ import annotations

import logging
import os
import threading

import pyarrow.flight as flight

from catalog import RocksCatalog
from flight_server import errors
from flight_server.feed.commits import CommitStream
from flight_server.feed.events import EventBatchCache
from flight_server.feed.fanout import FanOut
from flight_server.feed.request import COMMITS_FEED, parse_request
from flight_server.feed.stream import FeedDeps, FeedStream
from flight_server.observability.metrics import Metrics
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer

logger = logging.getLogger("icefloe.feed")

# Fan-out workers writing live commits to caught-up commits.v1 streams: the writes run in
# C++ without the GIL, so about one per core keeps every core busy during a burst.
FANOUT_WORKERS = max(2, min(4, os.cpu_count() or 2))


class FeedService:
    def __init__(self, catalog: RocksCatalog, authorizer: Authorizer, metrics: Metrics, stopping: threading.Event,
                 max_subscribers: int) -> None:
        self.authorizer = authorizer
        self.deps = FeedDeps(catalog, stopping, metrics)
        catalog.hub.max_subscribers = max_subscribers
        self.batches = EventBatchCache()
        self.fanout = FanOut(catalog.hub, workers=FANOUT_WORKERS)

    def close(self) -> None:
        self.fanout.close()

    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["feed"])
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise errors.InvalidArgument(
                "DoExchange needs FlightDescriptor.for_command(<JSON subscription>), "
                'e.g. {"feed": "commits.v1", "after": "latest"}'
            )
        request = parse_request(descriptor.command)
        stream: FeedStream
        if request.feed == COMMITS_FEED:
            stream = CommitStream(self.deps, context, request, writer, batches=self.batches)
            stream.fanout = self.fanout
        else:
            from flight_server.feed.rows import RowStream

            stream = RowStream(self.deps, context, request, writer)
        stream.run()
