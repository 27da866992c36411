"""DoExchange feeds: ``commits.v1`` (one event per commit) and ``rows.v1`` (appended rows)."""

from flight_server.feed.service import FeedService

__all__ = ["FeedService"]
