"""commits.v1: one event per matching commit, as record batches with ``EVENT_SCHEMA``."""

from __future__ import annotations

from typing import Any

from catalog.commit_log import CommitRecord
from flight_server.feed.events import EventBatchCache, record_matches
from flight_server.feed.stream import FeedStream


class CommitStream(FeedStream):
    def __init__(self, *args: Any, batches: EventBatchCache, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._batches = batches

    def handle(self, records: list[CommitRecord]) -> bool:
        matched = [r for r in records if record_matches(self.request, r)]
        if not matched:
            return False
        self.send_batch(self._batches.get(matched))
        self.server.metrics.delivered(matched[-1].committed_at_us)
        return True
