"""A small thread-safe, nearly-least-recently-used map for the commit path's caches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LockedLRU(Generic[K, V]):
    """At most ``size`` entries; a put beyond ``size`` drops the oldest entry not hit since it
    was last considered (a "second chance" clock: a hit entry goes to the back once instead).

    Reads take no lock and reorder nothing: the commit path looks up one cached text per
    retained snapshot per commit, and a lock plus a reorder per hit was the larger part of
    those lookups. A single dict read and a set insert are atomic in CPython, so a hit only
    marks the key; ``put`` (under the lock) does all reordering and eviction.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        # Ordered for O(1) removal at the front (a plain dict's front fills with deleted slots).
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._hit: set[K] = set()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is not None and key not in self._hit:
            self._hit.add(key)
        return found

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            entries = self._entries
            entries[key] = value
            entries.move_to_end(key)  # a replaced entry becomes the newest
            self._hit.discard(key)
            # Each pass looks at every entry at most once: a hit entry gets its second chance
            # (to the back, mark cleared), so the loop ends within one lap.
            while len(entries) > self._size:
                oldest, kept = entries.popitem(last=False)
                if oldest in self._hit:
                    self._hit.discard(oldest)
                    entries[oldest] = kept
