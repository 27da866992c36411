"""Flight SQL: protocol declarations, the dispatcher, statements, metadata and sessions."""

from flight_server.flightsql.dispatcher import FlightSqlService

__all__ = ["FlightSqlService"]
