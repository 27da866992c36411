"""Flight SQL service (placeholder until the Flight SQL read surface lands)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow.flight as flight

from flight_server import errors

if TYPE_CHECKING:
    from flight_server.server import IcefloeServer


class FlightSqlService:
    def __init__(self, server: IcefloeServer) -> None:
        self.server = server

    def get_flight_info(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        raise errors.Unimplemented("Flight SQL is not implemented yet")

    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        raise errors.Unimplemented("Flight SQL is not implemented yet")

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        raise errors.Unimplemented("Flight SQL is not implemented yet")

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        raise errors.Unimplemented("Flight SQL is not implemented yet")

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        raise errors.Unimplemented(f"unknown action {action.type!r}")

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return []
