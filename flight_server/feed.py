"""DoExchange feeds: commits.v1 and rows.v1 (placeholder)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.flight as flight

from flight_server import errors

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer


class FeedService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server

    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        raise errors.Unimplemented("the feed is not implemented yet")
