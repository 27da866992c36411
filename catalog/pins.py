"""Snapshot pins: snapshots that expiry must keep for a while.

A Flight SQL ticket names the snapshots its query saw at GetFlightInfo; the DoGet that
follows must still find them. The server pins each such snapshot for a retention window
(longer than any sane gap between GetFlightInfo and DoGet), and both the commit path's
bounded-metadata expiry and maintenance's expiry skip pinned snapshots. Pins live in memory:
after a restart the window starts again for no one, which only means a ticket older than the
restart may find its snapshot expired — answered with a clear FAILED_PRECONDITION.
"""

from __future__ import annotations

import threading
import time

TableKey = tuple[tuple[str, ...], str]


class SnapshotPins:
    """Thread-safe registry of (table, snapshot id) -> pin expiry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pins: dict[TableKey, dict[int, float]] = {}

    def pin(self, namespace: tuple[str, ...], table: str, snapshot_id: int, ttl_s: float) -> None:
        """Keep ``snapshot_id`` of ``namespace.table`` for at least ``ttl_s`` seconds from now."""
        until = time.monotonic() + ttl_s
        with self._lock:
            table_pins = self._pins.setdefault((tuple(namespace), table), {})
            table_pins[snapshot_id] = max(until, table_pins.get(snapshot_id, 0.0))

    def pinned(self, namespace: tuple[str, ...], table: str) -> set[int]:
        """Snapshot ids of ``namespace.table`` pinned right now (expired pins are dropped)."""
        now = time.monotonic()
        key = (tuple(namespace), table)
        with self._lock:
            table_pins = self._pins.get(key)
            if not table_pins:
                return set()
            live = {sid: until for sid, until in table_pins.items() if until > now}
            if live:
                self._pins[key] = live
            else:
                del self._pins[key]
            return set(live)
