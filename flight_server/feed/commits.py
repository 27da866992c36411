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
        patterns = self.request.patterns
        # Streams with the same table list share the filtered batches (see EventBatchCache).
        self._filter_key = None if patterns is None else tuple(p.text for p in patterns)

    def _matches(self, record: CommitRecord) -> bool:
        return record_matches(self.request, record)

    def handle(self, records: list[CommitRecord]) -> bool:
        event_batch = self._batches.matching(self._filter_key, records, self._matches)
        if event_batch is None:
            return False
        self.send_batch(event_batch.batch)
        live = self.delivering_live and event_batch.last_seq > self.replay_until
        self.deps.metrics.delivered(event_batch.last_committed_at_us, live=live)
        return True
