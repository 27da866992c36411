"""Streaming reads of one table: offsets are commit sequence numbers, batches are change scans.

Offsets are ``{"seq": N}``. ``latestOffset`` answers from a driver-side ``commits.v1``
subscription (:class:`FeedWatcher`) with a bounded wait, so a commit starts a micro-batch at
once; ``partitions(start, end)`` are the endpoints of the change scan of ``(start, end]``, which
the server answers the same way every time, so a query restarted from its checkpoint re-reads
exactly the rows of an unfinished batch and then goes on: every appended row once.

Options: ``startingOffsets`` (``latest`` default | ``earliest`` | a seq), ``startingTimestamp``,
``maxCommitsPerTrigger``, ``maxRowsPerTrigger``, ``maxBytesPerTrigger`` (the data files a
commit added, from its snapshot summary's ``added-files-size``), ``onNonAppend`` (``fail`` | ``skip`` |
``changes``), ``failOnDataLoss`` (default true), ``includeChangeColumns``,
``latestOffsetWaitMs`` (the bounded wait, default 1000).

``latestOffset(start=None, limit=None)`` has one signature for both API generations: pyspark
4.1 calls it with no arguments (the caps then apply from the previous end this process has
seen), 4.2+ passes the start and a ``ReadLimit`` (``getDefaultReadLimit`` turns the options into
one; ``Trigger.AvailableNow`` is supported there).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructType

from flight_server.cli.client import FeedCursorExpired
from pyspark_icefloe.batch import EndpointPartition, endpoint_partitions, read_all, read_endpoint, scan_headers
from pyspark_icefloe.connection import (
    IcefloeSparkError,
    Settings,
    bool_option,
    clean,
    int_option,
    option,
    quote_identifier,
)
from pyspark_icefloe.feed import Commit, FeedWatcher
from pyspark_icefloe.types import target_schema

try:  # pyspark 4.2+
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxFiles,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pyspark 4.1: latestOffset() without a start or a limit
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc,unused-ignore]
    ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None  # type: ignore[assignment,misc,unused-ignore]
    ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc,unused-ignore]

logger = logging.getLogger("icefloe.spark")

CHANGE_COLUMNS = (("_seq", LongType()), ("_snapshot_id", LongType()), ("_operation", StringType()))
ON_NON_APPEND = ("fail", "skip", "changes")
# Commits that leave the table's rows as they were, for servers whose change scans do not say
# "data_change": compaction is "replace", snapshot expiry "expire"; a schema change is read
# right by the change scan (columns by field id).
ROWS_UNCHANGED = frozenset({"create", "schema", "replace", "expire", "register", "properties"})
DATA_LOSS_HINT = "; set option failOnDataLoss to false to go on from the oldest commit the server keeps"
_EXPIRED_AT = (re.compile(r"log starts at (\d+)"), re.compile(r"scan from after=(\d+)"))


def offset(seq: int) -> dict[str, int]:
    return {"seq": int(seq)}


def starting_offset(starting: str, feed: Callable[[int | str], FeedWatcher]) -> dict[str, int]:
    """The offset a stream starts after for ``startingOffsets`` (earliest | latest | a seq),
    opening the driver's feed watcher at that position."""
    if starting == "earliest":
        watcher = feed("earliest")
        assert watcher.log_start is not None
        return offset(watcher.log_start - 1)
    if starting == "latest":
        return offset(feed("latest").ready(60))
    feed(int(starting)).ready(60)
    return offset(int(starting))


def seq_of(value: Mapping[str, Any] | None, what: str = "offset") -> int:
    if not isinstance(value, Mapping) or not isinstance(value.get("seq"), int):
        raise IcefloeSparkError(f'{what} must be {{"seq": N}}, got {json.dumps(value)[:80]}')
    return int(value["seq"])


class Caps:
    """How much one micro-batch may take: commits, rows, bytes (None = no cap); min rows to start one."""

    def __init__(self, commits: int | None = None, rows: int | None = None, min_rows: int | None = None,
                 bytes_: int | None = None) -> None:
        self.commits, self.rows, self.min_rows, self.bytes = commits, rows, min_rows, bytes_

    @property
    def capped(self) -> bool:
        return self.commits is not None or self.rows is not None or self.bytes is not None

    def end(self, start: int, pending: Sequence[Commit], latest: int,
            size_of: Callable[[Commit], int] = lambda c: 0) -> int:
        """The end offset for commits ``pending`` (seq > start, in order) up to ``latest``;
        ``size_of`` gives a commit's bytes (asked only with a byte cap)."""
        if self.min_rows is not None and sum(c.added_rows for c in pending) < self.min_rows:
            return start
        if not self.capped:
            return latest
        rows = size = 0
        for n, commit in enumerate(pending, 1):
            grown = size + size_of(commit) if self.bytes is not None else 0
            over_rows = self.rows is not None and rows + commit.added_rows > self.rows
            over_bytes = self.bytes is not None and grown > self.bytes
            if n > 1 and (over_rows or over_bytes):
                return pending[n - 2].seq  # a commit is never split: at least one per batch
            rows, size = rows + commit.added_rows, grown
            if self.commits is not None and n >= self.commits:
                return commit.seq if n < len(pending) else latest
        return latest


class TableStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("icefloe").option("table", "ns.t")``."""

    def __init__(self, settings: Settings, table: str, schema: StructType, options: Mapping[str, str]) -> None:
        self.settings = settings
        self.table = table
        self.target = target_schema(schema)
        self.headers = scan_headers(options)
        self.starting = option(options, "startingOffsets", "latest") or "latest"
        self.starting_timestamp = option(options, "startingTimestamp")
        self.caps = Caps(int_option(options, "maxCommitsPerTrigger", None, 1),
                         int_option(options, "maxRowsPerTrigger", None, 1),
                         bytes_=int_option(options, "maxBytesPerTrigger", None, 1))
        self.on_non_append = (option(options, "onNonAppend", "fail") or "fail").lower()
        if self.on_non_append not in ON_NON_APPEND:
            raise IcefloeSparkError(f"option onNonAppend is fail, skip or changes, not {self.on_non_append[:40]!r}")
        self.fail_on_data_loss = bool_option(options, "failOnDataLoss", True)
        self.wait_s = (int_option(options, "latestOffsetWaitMs", 1000, 0) or 0) / 1000
        if self.starting not in ("earliest", "latest"):
            int_option({"startingOffsets": self.starting}, "startingOffsets", None, 0)
        # Driver-only state, created on first use (executors only call read()).
        self._watcher: FeedWatcher | None = None
        self._previous_end: int | None = None
        self._target_end: int | None = None  # Trigger.AvailableNow
        self._sizes: dict[int, int] = {}  # snapshot id -> bytes of data files it added

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_watcher"] = None  # threads stay on the driver
        return state

    # -- offsets -------------------------------------------------------------------------

    def _feed(self, after: int | str) -> FeedWatcher:
        if self._watcher is None:
            self._watcher = FeedWatcher(self.settings, [self.table], after)
            try:
                self._watcher.ready(60)
            except FeedCursorExpired as exc:
                self._watcher.close()
                if self.fail_on_data_loss:
                    self._watcher = None
                    raise IcefloeSparkError(f"{self.table}: {exc}{DATA_LOSS_HINT}") from None
                logger.warning("icefloe stream of %s: the feed no longer has seq %s; following it from its "
                               "earliest commit because failOnDataLoss is false", self.table, after)
                self._watcher = FeedWatcher(self.settings, [self.table], "earliest")
                self._watcher.ready(60)
        return self._watcher

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark's names)
        initial = self._initial()
        self._previous_end = seq_of(initial)  # pyspark 4.1 caps the first batch from here
        return initial

    def _initial(self) -> dict[str, int]:
        if self.starting_timestamp is not None:
            return offset(self._seq_at(self.starting_timestamp))
        return starting_offset(self.starting, self._feed)

    def _seq_at(self, text: str) -> int:
        """The seq before the table's first commit at or after the timestamp."""
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise IcefloeSparkError(f"option startingTimestamp must be ISO 8601, got {text[:40]!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        # A subscription of its own from the log's start: the driver's watcher may already
        # follow from "latest" (Spark can ask for the latest offset before the initial one).
        feed = FeedWatcher(self.settings, [self.table], "earliest")
        try:
            head = feed.ready(60)
            assert feed.log_start is not None
            feed.wait_until_covered(head, 60)
            for commit in feed.commits_after(feed.log_start - 1):
                if commit.committed_at >= when:
                    return commit.seq - 1
            return head
        finally:
            feed.close()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, int]:  # noqa: N802
        begin = seq_of(start, "start offset") if start is not None else self._previous_end
        feed = self._feed(begin if begin is not None else "latest")
        caps = self._caps(limit) if start is not None else self.caps
        end = self._end(feed, begin, caps)
        if begin is not None and end <= begin and self._target_end is None and self.wait_s > 0:
            if feed.wait_beyond(begin, self.wait_s):
                end = self._end(feed, begin, caps)
        self._previous_end = max(end, begin if begin is not None else end)
        return offset(self._previous_end)

    def _end(self, feed: FeedWatcher, begin: int | None, caps: Caps) -> int:
        latest = max(feed.ready(60), feed.last_seq() or 0)
        if self._target_end is not None:
            latest = min(latest, self._target_end)
        if begin is None:
            return latest  # 4.1, first call of this process: no known start to cap from
        if caps.capped or caps.min_rows is not None:
            feed.wait_until_covered(feed.ready(60), 60)  # the commits up to the head, to count them
        pending = [c for c in feed.commits_after(begin) if c.seq <= latest]
        if caps.bytes is not None:
            self._learn_sizes(pending)
        return max(begin, caps.end(begin, pending, latest, self._size_of))

    def _size_of(self, commit: Commit) -> int:
        snapshot = commit.row.get("snapshot_id")
        return self._sizes.get(int(snapshot), 0) if snapshot is not None else 0

    def _learn_sizes(self, pending: Sequence[Commit]) -> None:
        """Each pending commit's added bytes, from the table's ``$snapshots`` summaries (one query
        for the commits not seen before; the feed's events carry rows and files, not bytes)."""
        wanted = sorted({int(c.row["snapshot_id"]) for c in pending
                         if c.row.get("snapshot_id") is not None} - self._sizes.keys())
        if not wanted:
            return
        namespace, _, name = self.table.rpartition(".")
        sql = (f"SELECT snapshot_id, summary FROM {quote_identifier(namespace)}.{quote_identifier(name + '$snapshots')}"
               f" WHERE snapshot_id IN ({', '.join(str(w) for w in wanted)})")
        client = self.settings.connect()
        try:
            result = read_all(client, sql)
        finally:
            client.close()
        for row in result.to_pylist():
            summary = dict(row["summary"] or [])
            self._sizes[int(row["snapshot_id"])] = int(summary.get("added-files-size") or 0)

    def _caps(self, limit: Any) -> Caps:
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            return Caps()
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return Caps(self.caps.commits, limit.max_rows)
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            return Caps(limit.max_files, self.caps.rows, bytes_=self.caps.bytes)
        if ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            return Caps(self.caps.commits, self.caps.rows, bytes_=limit.max_bytes)
        if ReadMinRows is not None and isinstance(limit, ReadMinRows):
            return Caps(self.caps.commits, self.caps.rows, limit.min_rows, self.caps.bytes)
        return self.caps

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        """``maxRowsPerTrigger`` as ``ReadMaxRows``, else ``maxBytesPerTrigger`` as ``ReadMaxBytes``,
        else ``maxCommitsPerTrigger`` as ``ReadMaxFiles`` (a commit counts as one "file"), else
        everything available; the other caps given hold as well (Spark passes one limit)."""
        if self.caps.rows is not None:
            return ReadMaxRows(self.caps.rows)
        if self.caps.bytes is not None:
            return ReadMaxBytes(self.caps.bytes)
        if self.caps.commits is not None:
            return ReadMaxFiles(self.caps.commits)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802
        """The newest commit of the table seen on the feed (lag = this minus the batch's end)."""
        if self._watcher is None:
            return None
        return offset(max(self._watcher.ready(60), self._watcher.last_seq() or 0))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        feed = self._feed("latest")
        self._target_end = max(feed.ready(60), feed.last_seq() or 0)

    # -- batches -------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, until = seq_of(start, "start offset"), seq_of(end, "end offset")
        self._previous_end = max(self._previous_end or until, until)
        if until <= after:
            return []
        client = self.settings.connect()
        try:
            info = self._change_scan(client, after, until)
        finally:
            client.close()
        return endpoint_partitions(info)

    def _change_scan(self, client: Any, after: int, until: int) -> flight.FlightInfo:
        include = "all" if self.on_non_append == "changes" else "appends"
        body = {"changes": self.table, "after": after, "until": until, "include": include}
        descriptor = flight.FlightDescriptor.for_command(json.dumps(body).encode())
        try:
            info = client.flight_info(descriptor, self.headers)
        except pa.ArrowException as exc:  # OUT_OF_RANGE arrives as ArrowInvalid
            if "cursor expired" not in str(exc):
                raise
            if self.fail_on_data_loss:
                raise IcefloeSparkError(f"{self.table}: {clean(exc)}{DATA_LOSS_HINT}") from None
            resume = _resume_after(str(exc))
            if resume is None or resume >= until or resume <= after:
                raise
            logger.warning("icefloe stream of %s: rows in (%d, %d] are gone (%s); going on from %d because "
                           "failOnDataLoss is false", self.table, after, resume, clean(exc), resume)
            return self._change_scan(client, resume, until)
        non_appends = [c for c in json.loads(info.app_metadata or b"{}").get("non_appends", []) if _changes_rows(c)]
        if non_appends and self.on_non_append == "fail":
            first = non_appends[0]
            raise IcefloeSparkError(
                f"{self.table} has a non-append commit in the stream (seq {first['seq']}: {first['operation']}); "
                'set option onNonAppend to "skip" (ignore it) or "changes" (emit its _operation rows)')
        return info

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EndpointPartition)
        return read_endpoint(self.settings, partition, self.target)

    def commit(self, end: dict[str, Any]) -> None:
        if self._watcher is not None:
            self._watcher.forget_through(seq_of(end, "end offset"))

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None


def _changes_rows(commit: Mapping[str, Any]) -> bool:
    """Whether a listed non-append commit changed rows (the server says so in "data_change";
    a table's creation counts as none: the stream starts on an empty table)."""
    if commit.get("operation") == "create":
        return False
    if isinstance(commit.get("data_change"), bool):
        return bool(commit["data_change"])
    return commit.get("operation") not in ROWS_UNCHANGED


def _resume_after(message: str) -> int | None:
    for pattern in _EXPIRED_AT:
        m = pattern.search(message)
        if m:
            value = int(m.group(1))
            return value - 1 if pattern is _EXPIRED_AT[0] else value
    return None
