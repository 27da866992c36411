"""Looking into an in-process ``Engine``'s DuckDB slots (tests of what a query leaves behind)."""

from __future__ import annotations

import duckdb

from flight_server.engine import Engine


def kept_cursor(engine: Engine, single_thread: bool = False) -> duckdb.DuckDBPyConnection | None:
    """The cursor the engine's (single) slot keeps for its next query, if any; ``single_thread``:
    of the one-thread slot that queries reading nothing (``SELECT 1``) run on."""
    slot = engine.slots.take(single_thread=single_thread)
    try:
        return slot._kept
    finally:
        engine.slots.give_back(slot, [], suspect=False)
