"""Looking into an in-process ``Engine``'s DuckDB slots (tests of what a query leaves behind)."""

from __future__ import annotations

import duckdb

from flight_server.engine import Engine


def kept_cursor(engine: Engine) -> duckdb.DuckDBPyConnection | None:
    """The cursor the engine's (single) slot keeps for its next query, if any."""
    slot = engine.slots.take()
    try:
        return slot._kept
    finally:
        engine.slots.give_back(slot, [], suspect=False)
