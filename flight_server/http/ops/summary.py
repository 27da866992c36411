"""The watch page's health strip and charts: ``GET /api/summary``, from the server's own metrics.

The page gets JSON, not Prometheus text to parse: the levels (readiness, head, subscribers,
queries, lineage outbox) are read when asked, like a scrape does, and the rates come from a
``Sampler`` that reads the event counters every ``SAMPLE_S`` seconds into a ring of
``SAMPLES`` points, so a page opened now shows the last few minutes at once rather than an
empty chart. Each point of ``series`` is the rate over the interval ending at its time:
commits/s, rows/s (added and deleted as readers see them; commits that change no row are not
counted), live feed lag (mean, ms; replays from the log are not lag) and statement latency
(mean, ms; statements as the query log records them).

One sampler per server (the REST and the metrics port share it); its thread ends with the server.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from flight_server.http.deps import HttpDeps
    from flight_server.http.ops.events import CommitBroadcaster
    from flight_server.observability.metrics import Metrics
    from flight_server.observability.operations import Operations

logger = logging.getLogger("icefloe.http.summary")

SAMPLE_S = 2.0
SAMPLES = 150  # five minutes
WRITE_KINDS = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "COPY", "TRUNCATE"})


class Sample(NamedTuple):
    at: float
    commits: float
    rows_added: float
    rows_deleted: float
    lag_sum: float
    lag_count: float
    statement_sum: float
    statement_count: float


def take(metrics: Metrics) -> Sample:
    """The event counters now (summed over their per-thread shards)."""
    lag = metrics.feed_lag.totals().get((), [0.0])
    statements = metrics.statement_seconds.totals().get((), [0.0])
    return Sample(
        time.time(), sum(cell[0] for cell in metrics.commits.totals().values()),
        metrics.commit_rows.value(("added",)), metrics.commit_rows.value(("deleted",)),
        lag[-1], sum(lag[:-1]), statements[-1], sum(statements[:-1]),
    )


def _rate(newer: Sample, older: Sample) -> dict[str, Any]:
    span = max(newer.at - older.at, 1e-6)
    lags = newer.lag_count - older.lag_count
    statements = newer.statement_count - older.statement_count
    return {
        "t": round(newer.at, 3),
        "commits_per_s": round((newer.commits - older.commits) / span, 3),
        "rows_per_s": round((newer.rows_added - older.rows_added + newer.rows_deleted - older.rows_deleted) / span, 3),
        "feed_lag_ms": round((newer.lag_sum - older.lag_sum) / lags * 1000, 3) if lags else None,
        "query_ms": round((newer.statement_sum - older.statement_sum) / statements * 1000, 3) if statements else None,
    }


class Sampler:
    """Reads ``metrics`` every ``period_s`` into a ring (a daemon thread, ended by ``stopping``)."""

    def __init__(self, metrics: Metrics, stopping: threading.Event, period_s: float = SAMPLE_S) -> None:
        self.metrics = metrics
        self.period_s = period_s
        self._stopping = stopping
        self._samples: deque[Sample] = deque(maxlen=SAMPLES + 1)
        self._lock = threading.Lock()
        self._samples.append(take(metrics))
        self._thread = threading.Thread(target=self._run, name="icefloe-ops-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.period_s):
            try:
                sample = take(self.metrics)
            except Exception:  # a sampling bug must not end the charts for good
                logger.warning("metrics sample failed", exc_info=True)
                continue
            with self._lock:
                self._samples.append(sample)

    def series(self) -> list[dict[str, Any]]:
        """Rates per interval, oldest first, up to now (the last point ends at this call)."""
        with self._lock:
            samples = list(self._samples)
        now = take(self.metrics)
        if now.at - samples[-1].at >= 0.2:
            samples.append(now)
        return [_rate(newer, older) for older, newer in zip(samples, samples[1:], strict=False)]


_SAMPLERS: weakref.WeakKeyDictionary[Any, Sampler] = weakref.WeakKeyDictionary()
_SAMPLERS_LOCK = threading.Lock()


def sampler_of(deps: HttpDeps) -> Sampler:
    """The server's sampler (started on first use; one per ``HttpDeps``, shared by its ports)."""
    with _SAMPLERS_LOCK:
        sampler = _SAMPLERS.get(deps)
        if sampler is None:
            sampler = _SAMPLERS[deps] = Sampler(deps.metrics, deps.stopping)
        return sampler


def _refused_writes(metrics: Metrics) -> int:
    appends = sum(cell[0] for (status,), cell in metrics.append_requests.totals().items() if status != "OK")
    statements = sum(cell[0] for (kind, status), cell in metrics.statements.totals().items()
                     if kind in WRITE_KINDS and status != "OK")
    return int(appends + statements)


def summary(ops: Operations, metrics: Metrics, sampler: Sampler, broadcaster: CommitBroadcaster) -> dict[str, Any]:
    """The health strip and the chart series (see the module docstring)."""
    for hook in metrics.before_scrape:  # the query log's pending statements are counted first
        hook()
    health = ops.health()
    lineage = ops.lineage
    body: dict[str, Any] = {
        "ready": health["ready"], "checks": health["checks"],
        "uptime_s": round(time.time() - metrics.started, 1),
        "feed_subscribers": ops.subscribers(),
        "watch_streams": broadcaster.open_count,
        "queries": {"running": ops.engine.watchdog.running_count(), "queued": ops.engine.slots.waiting},
        "refused_writes": _refused_writes(metrics),
        "lineage": {"state": lineage.state, "outbox_depth": lineage.outbox_depth},
        "sample_s": sampler.period_s,
        "series": sampler.series(),
    }
    if health["checks"]["catalog"] == "open":
        body["head"] = ops.head()
        body["log_start"] = ops.catalog.log.log_start()
        body["lineage"]["dead_letters"] = lineage.dead_letters()
    return body
