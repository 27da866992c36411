"""The end of a running query: its cursor closed or kept, its slot given back, exactly once.

A query ends when its reader is dropped (``Engine.execute`` ties the release to the reader's
finalizer), when the code that ran it to completion says so, or, whatever holds the reader,
when the call that started it ends (``follow_call``).
"""

from __future__ import annotations

import duckdb

from flight_server import errors
from flight_server.engine import duckdb_seam, messages
from flight_server.engine.slots import SlotPool
from flight_server.engine.watchdog import Running, Watchdog, interrupt


class QueryRuns:
    """Releases running queries: the slot pool and the watchdog are all it needs."""

    def __init__(self, slots: SlotPool, watchdog: Watchdog) -> None:
        self.slots = slots
        self.watchdog = watchdog

    def follow_call(self, run: Running) -> None:
        """Release ``run`` when its call ends, if nothing did before (see ``outlived_its_call``)."""
        if run.call is not None:
            run.call.at_end(run, lambda: self.outlived_its_call(run))

    def release(self, run: Running) -> None:
        """End of a query: close its cursor, drop its views, return its slot (exactly once)."""
        if not self.watchdog.remove(run):
            return
        if run.call is not None:
            run.call.forget(run)
        if not run.pooled:
            return  # planning, on a pooled parser cursor (kept for the next call)
        suspect = run.failed or run.interrupted is not None
        if run.catalog_version is not None:
            try:
                suspect = suspect or duckdb_seam.catalog_version(run.cursor) != run.catalog_version
            except duckdb.Error:
                suspect = True
        keep = run.cursor_reusable and not suspect
        for cursor in (run.helpers if keep else (run.cursor, *run.helpers)):
            try:
                cursor.close()
            except duckdb.Error:
                pass
        if keep:
            run.slot.keep(run.cursor)
        self.slots.give_back(run.slot, run.views, suspect)

    def outlived_its_call(self, run: Running) -> None:
        """The call that started ``run`` ended and its reader was not dropped: something still
        holds it (a failed stream's traceback, in a reference cycle, until the collector runs).

        Nobody reads it any more: gRPC wrote and dropped the stream before it ended the call.
        Waiting for the collector would hold the query's slot, and a few such failures would
        refuse every query ("too many concurrent queries"), so it is stopped and freed now.
        """
        if run.released:
            return  # its cursor may already run the slot's next query: not to be interrupted
        run.failed = True  # its slot is audited before reuse
        interrupt(run)
        self.release(run)


def run_failure(run: Running, timeout_s: float, exc: duckdb.Error) -> Exception:
    """The error to raise for a DuckDB error of ``run``: what interrupted it, if anything."""
    run.failed = True  # its slot is audited before reuse
    if run.interrupted == "timeout":
        return errors.DeadlineExceeded(f"query exceeded the {timeout_s:g}s timeout")
    if run.interrupted == "cancelled":
        return errors.Cancelled("query cancelled")
    if run.interrupted == "shutdown":
        return errors.Unavailable("the server is shutting down; retry")
    return messages.map_duckdb(exc)
