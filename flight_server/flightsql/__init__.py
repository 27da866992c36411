"""Flight SQL: protocol declarations, the dispatcher, statements, metadata and sessions.

``FlightSqlService`` is imported on first use: the dispatcher pulls in the whole server (DuckDB,
pyiceberg, sqlglot), and clients that only need ``protocol`` (the Spark data source's Python
workers, ``cli.sql``) should not pay seconds for it at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flight_server.flightsql.dispatcher import FlightSqlService

__all__ = ["FlightSqlService"]


def __getattr__(name: str) -> Any:
    if name == "FlightSqlService":
        from flight_server.flightsql.dispatcher import FlightSqlService

        return FlightSqlService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
