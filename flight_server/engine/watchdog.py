"""The query watchdog: interrupts DuckDB when a query passes its deadline, its client cancels,
or the server shuts down.

Every running query, and every planning step, registers a ``Running`` here. One thread looks
at them ten times a second. It must never die: an exception from DuckDB's ``interrupt()``
(a cursor that closed as the query ended) or from a dead RPC context is logged and the loop
goes on, since without it no timeout or cancellation is enforced.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import duckdb

from flight_server.engine.slots import Slot
from flight_server.security.headers import HeadersMiddleware, call_of

logger = logging.getLogger("icefloe.engine")


class Running:
    """A query DuckDB is executing: what the watchdog needs to interrupt it, and what to free."""

    def __init__(self, slot: Slot, cursor: duckdb.DuckDBPyConnection, context: Any, deadline: float) -> None:
        self.slot = slot
        self.cursor = cursor
        self.context = context
        # What says whether ``context`` still exists (taken now, while the call surely runs).
        self.call: HeadersMiddleware | None = call_of(context)
        self.deadline = deadline
        self.views: list[str] = []
        self.parts: list[Any] = []  # the sources of a single-table query (for the plain-scan path)
        self.helpers: list[duckdb.DuckDBPyConnection] = []  # native-scan cursors feeding this query
        self.interrupted: str | None = None
        # The query registered nothing on ``cursor`` and changed none of its settings (it
        # pinned no table): a clean end may leave the cursor to the slot's next query.
        self.cursor_reusable = False
        self.pooled = True  # False: a planning cursor, whose database is not a pooled slot
        self.released = False
        self.failed = False
        # DuckDB's count of name-changing statements on ``cursor`` before the client's ran.
        self.catalog_version: int | None = None


class Watchdog:
    def __init__(self, stopping: threading.Event) -> None:
        # Set when the server begins to shut down: running queries are interrupted so their
        # streams end and gRPC can drain.
        self._server_stopping = stopping
        self._running: set[Running] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="icefloe-query-watchdog", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def running_count(self) -> int:
        """Queries executing now (planning steps not counted)."""
        with self._lock:
            return sum(1 for run in self._running if run.pooled)

    def add(self, run: Running) -> None:
        with self._lock:
            self._running.add(run)

    def remove(self, run: Running) -> bool:
        """Unregister ``run``; False if it was already released (release happens exactly once)."""
        with self._lock:
            if run.released:
                return False
            run.released = True
            self._running.discard(run)
            # The RPC context dies with its call; never let the watchdog touch it afterwards.
            run.context = None
            return True

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for run in list(self._running):
                interrupt(run)

    def _cancelled(self, run: Running) -> bool | None:
        """Ask the query's RPC context whether the client cancelled; None when its call has
        ended while the query is still registered (its reader outlived the call).

        A registered query does not mean a live call: a failed stream's reader can sit in a
        reference cycle until the garbage collector frees it, and asking the dead call's
        context then crashed the server (SIGSEGV). So the context is asked only through the
        call's middleware, which knows whether the call still runs; a context without it
        (no such middleware installed) is never asked.
        """
        with self._lock:
            context, call = run.context, run.call
            if run.released or context is None or call is None:
                return False
            return call.client_cancelled(context)

    def _watch(self) -> None:
        # Nothing may end this loop but close(): without it no timeout or cancel is enforced.
        while not self._stop.wait(0.1):
            try:
                self.watch_once(time.monotonic())
            except Exception:
                logger.exception("query watchdog: unexpected error (the watchdog keeps running)")

    def watch_once(self, now: float) -> None:
        with self._lock:
            running = list(self._running)
        for run in running:
            if run.interrupted:
                continue
            reason = None
            if self._server_stopping.is_set():
                reason = "shutdown"
            elif now > run.deadline:
                reason = "timeout"
            else:
                try:
                    cancelled = self._cancelled(run)
                except Exception:  # a context that failed to answer: nobody is waiting
                    cancelled = True
                if cancelled is None:
                    reason = "ended"  # whatever the query still does, nobody will read it
                elif cancelled:
                    reason = "cancelled"
            if reason:
                with self._lock:
                    # Decided and done under the lock ``remove`` takes: a query released
                    # meanwhile is left alone, since its slot (and a kept cursor) may already
                    # run the next query.
                    if run.released or run.interrupted:
                        continue
                    run.interrupted = reason
                    logger.log(logging.DEBUG if reason == "ended" else logging.INFO, "interrupting query (%s)", reason)
                    interrupt(run)


def interrupt(run: Running) -> None:
    """Interrupt a query's cursors; one that was closed meanwhile (the query ended) is fine."""
    for cursor in (run.cursor, *run.helpers):
        try:
            cursor.interrupt()
        except Exception:  # duckdb raises ConnectionException on a closed cursor
            logger.debug("interrupt of a finished cursor", exc_info=True)
