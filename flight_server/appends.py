"""Plain Flight appends: DoPut on FlightDescriptor.for_path(namespace, table) (placeholder)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.flight as flight

from flight_server import errors

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer


class AppendService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        raise errors.Unimplemented("appends are not implemented yet")
