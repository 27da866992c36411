"""``format("icefloe-commits")``: a stream of commit events, one row per commit, for Spark-side
tooling that reacts to commits (all tables, or ``tables`` = comma-separated names and globs).

Offsets are ``{"seq": N}`` like the table stream; a batch (start, end] is read back from the
durable commit log over ``commits.v1`` (``after`` = start, up to end), so it is the same rows
every time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from flight_server.cli.client import feed_messages
from pyspark_icefloe.connection import Settings, option
from pyspark_icefloe.feed import FeedWatcher
from pyspark_icefloe.stream import offset, seq_of, starting_offset
from pyspark_icefloe.types import conform, target_schema

EVENT_SCHEMA = (
    "seq bigint, committed_at timestamp, namespace string, `table` string, table_uuid string, operation string, "
    "snapshot_id bigint, parent_snapshot_id bigint, added_rows bigint, deleted_rows bigint, added_files bigint, "
    "metadata_location string, principal string"
)


@dataclass
class CommitRange(InputPartition):
    after: int
    until: int


class CommitsStreamReader(DataSourceStreamReader):
    """Commit events of the matching tables, in seq order."""

    def __init__(self, settings: Settings, schema: StructType, options: Mapping[str, str]) -> None:
        self.settings = settings
        self.target = target_schema(schema)
        raw = option(options, "tables")
        self.tables = [t.strip() for t in raw.split(",") if t.strip()] if raw else None
        self.starting = option(options, "startingOffsets", "latest") or "latest"
        self.wait_s = float(option(options, "latestOffsetWaitMs", "1000") or 1000) / 1000
        self._watcher: FeedWatcher | None = None
        self._previous_end: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_watcher": None}

    def _feed(self, after: int | str) -> FeedWatcher:
        if self._watcher is None:
            self._watcher = FeedWatcher(self.settings, self.tables, after)
            self._watcher.ready(60)
        return self._watcher

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark's names)
        return starting_offset(self.starting, self._feed)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, int]:  # noqa: N802
        begin = seq_of(start) if start is not None else self._previous_end
        feed = self._feed(begin if begin is not None else "latest")
        end = max(feed.ready(60), feed.last_seq() or 0)
        if begin is not None and end <= begin and self.wait_s > 0 and feed.wait_beyond(begin, self.wait_s):
            end = max(end, feed.last_seq() or 0)
        self._previous_end = max(end, begin or end)
        return offset(self._previous_end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, until = seq_of(start), seq_of(end)
        return [CommitRange(after, until)] if until > after else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CommitRange)
        client = self.settings.connect()
        headers = client.auth_headers
        client.close()
        roots = open(self.settings.tls_root_certs, "rb").read() if self.settings.tls_root_certs else None
        request: dict[str, Any] = {"feed": "commits.v1", "after": partition.after, "heartbeat_ms": 200}
        if self.tables is not None:
            request["tables"] = self.tables
        for kind, payload in feed_messages(self.settings.uri, request, headers=headers, tls_root_certs=roots):
            if kind == "heartbeat" and int(payload["head"]) >= partition.until:
                return
            if kind == "batch":
                batch = payload.filter(pc.less_equal(payload.column("seq"), partition.until))
                if batch.num_rows:
                    yield conform(batch, self.target)
                if batch.num_rows < payload.num_rows or payload.column("seq")[-1].as_py() >= partition.until:
                    return

    def commit(self, end: dict[str, Any]) -> None:
        if self._watcher is not None:
            self._watcher.forget_through(seq_of(end))

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
