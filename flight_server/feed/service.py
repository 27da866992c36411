"""FeedService: the DoExchange entry point for the commit and row feeds."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pyarrow.flight as flight

from flight_server import errors
from flight_server.feed.commits import CommitStream
from flight_server.feed.events import EventBatchCache
from flight_server.feed.fanout import FanOut
from flight_server.feed.request import COMMITS_FEED, parse_request
from flight_server.feed.stream import FeedStream
from flight_server.security import roles

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

logger = logging.getLogger("icefloe.feed")

# Fan-out workers writing live commits to caught-up commits.v1 streams: the writes run in
# C++ without the GIL, so about one per core keeps every core busy during a burst.
FANOUT_WORKERS = max(2, min(4, os.cpu_count() or 2))


class FeedService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server
        server.catalog.hub.max_subscribers = server.config.max_subscribers
        self.batches = EventBatchCache()
        self.fanout = FanOut(server.catalog.hub, workers=FANOUT_WORKERS)

    def close(self) -> None:
        self.fanout.close()

    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        self.server.authorize(context, roles.FLIGHT_COMMANDS["feed"])
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise errors.InvalidArgument(
                "DoExchange needs FlightDescriptor.for_command(<JSON subscription>), "
                'e.g. {"feed": "commits.v1", "after": "latest"}'
            )
        request = parse_request(descriptor.command)
        stream: FeedStream
        if request.feed == COMMITS_FEED:
            stream = CommitStream(self.server, context, request, writer, batches=self.batches)
            stream.fanout = self.fanout
        else:
            from flight_server.feed.rows import RowStream

            stream = RowStream(self.server, context, request, writer)
        stream.run()
