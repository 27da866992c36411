"""commits.v1: one event per matching commit, as record batches with ``EVENT_SCHEMA``."""

from __future__ import annotations

from catalog.commit_log import CommitRecord
from flight_server.feed.events import record_matches, records_to_batch
from flight_server.feed.stream import FeedStream


class CommitStream(FeedStream):
    def handle(self, records: list[CommitRecord]) -> bool:
        matched = [r for r in records if record_matches(self.request, r)]
        if not matched:
            return False
        self.send_batch(records_to_batch(matched))
        return True
