"""FeedService: the DoExchange entry point for the commit and row feeds."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow.flight as flight

from flight_server import errors
from flight_server.feed.commits import CommitStream
from flight_server.feed.events import EventBatchCache
from flight_server.feed.request import COMMITS_FEED, parse_request
from flight_server.feed.stream import FeedStream

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer

logger = logging.getLogger("icefloe.feed")


class FeedService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server
        server.catalog.hub.max_subscribers = server.config.max_subscribers
        self.batches = EventBatchCache()

    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        self.server.authorize(context, "read")
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise errors.InvalidArgument(
                "DoExchange needs FlightDescriptor.for_command(<JSON subscription>), "
                'e.g. {"feed": "commits.v1", "after": "latest"}'
            )
        request = parse_request(descriptor.command)
        stream: FeedStream
        if request.feed == COMMITS_FEED:
            stream = CommitStream(self.server, context, request, writer, batches=self.batches)
        else:
            from flight_server.feed.rows import RowStream

            stream = RowStream(self.server, context, request, writer)
        stream.run()
