"""Prometheus metrics of one server (families ``icefloe_*``), and the RPC decorator that feeds them.

Two kinds of figures, chosen for a small cost on the hot path:
- *events* (RPCs, rows streamed, appends, commits, feed delivery lag) are counted where they
  happen, with one call each: the RPC entry points are wrapped by ``rpc`` (errors.guard plus a
  histogram observation), streams count per record batch, never per row;
- *levels* (queries running and queued, feed subscribers, lineage outbox, commit head, RocksDB
  size) are read from the components only when ``/metrics`` is scraped (``LiveCollector``), so
  keeping them up to date costs nothing.

``ICEFLOE_INSTRUMENTATION=off`` makes every event call return at once: the baseline that
``benchmarks/bench_ops_overhead.py`` measures the instrumentation against.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flight_server import __version__, errors
from flight_server.commit_kinds import is_maintenance
from flight_server.observability.metric_cells import CellCollector, CellCounter, CellHistogram

if TYPE_CHECKING:
    from catalog.commit_log import CommitRecord

# The *_created series (one per family and label set) double the text for nothing a dashboard uses.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# RPC latency buckets (seconds): SELECT 1 is ~3 ms end to end, big scans take seconds.
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)
# A replay delivers history: its "lag" is the age of the commits read, seconds to days.
REPLAY_BUCKETS = (0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0)


def instrumentation_on() -> bool:
    return os.environ.get("ICEFLOE_INSTRUMENTATION", "on").lower() not in ("off", "0", "false", "no")


class Metrics:
    """The event counters of one server, in a registry of its own (not the process-global one).

    Args:
        enabled: False makes every recording call a no-op (the benchmark baseline).
    """

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = instrumentation_on() if enabled is None else enabled
        self.started = time.time()
        self.registry = CollectorRegistry(auto_describe=True)
        self.rpc_seconds = CellHistogram("icefloe_rpc_seconds", "RPC handler time by method and gRPC status "
                                         "(its _count is the RPC count)", ["method", "status"], RPC_BUCKETS)
        self.statements = CellCounter("icefloe_statements", "SQL statements by kind and status", ["kind", "status"])
        self.stream_rows = CellCounter("icefloe_stream_rows", "Rows streamed to clients by DoGet")
        self.stream_bytes = CellCounter("icefloe_stream_bytes", "Arrow bytes streamed to clients by DoGet")
        self.append_requests = CellCounter("icefloe_append_requests", "Plain Flight appends (DoPut) by status",
                                           ["status"])
        self.append_rows = CellCounter("icefloe_append_rows", "Rows received by acknowledged appends")
        self.append_bytes = CellCounter("icefloe_append_bytes", "Arrow bytes received by acknowledged appends")
        self.append_seconds = CellHistogram("icefloe_append_commit_seconds",
                                            "Time from a DoPut's start to its durable acknowledgement", (),
                                            RPC_BUCKETS)
        self.commits = CellCounter("icefloe_commits", "Catalog commits landed, by operation", ["operation"])
        self.group_size = CellHistogram("icefloe_append_group_size", "Appends folded into one group commit", (),
                                        GROUP_BUCKETS)
        # Live and replayed deliveries apart: one catch-up over old history made a 24 s
        # observation in the live histogram, and an alert on it would have fired.
        self.feed_lag = CellHistogram("icefloe_feed_delivery_lag_seconds",
                                      "Commit to commits.v1 write, per event batch sent live (published to the "
                                      "stream as it landed); alert on this one", (), LAG_BUCKETS)
        self.feed_replay_lag = CellHistogram("icefloe_feed_replay_lag_seconds",
                                             "Age of the newest commit in each commits.v1 event batch read from the "
                                             "durable log (a replay from 'after', or a subscriber catching up)", (),
                                             REPLAY_BUCKETS)
        self.commit_rows = CellCounter("icefloe_commit_rows", "Rows landed commits added or deleted, as readers see "
                                       "them (commits that change no row, such as compaction, not counted)",
                                       ["change"])
        self.statement_seconds = CellHistogram("icefloe_statement_seconds", "SQL statement time, as the query log "
                                               "records it (a SELECT until its stream ends)", (), RPC_BUCKETS)
        self.maintenance_runs = CellCounter("icefloe_maintenance_runs", "Maintenance runs of one table, by status",
                                            ["status"])
        self.quality_checked = CellCounter("icefloe_quality_checked_rows", "Rows checked against a table's quality "
                                           "expectation", ["table", "expectation", "action"])
        self.quality_failed = CellCounter("icefloe_quality_failed_rows", "Rows that failed a table's quality "
                                          "expectation (blocked, quarantined or warned by its action)",
                                          ["table", "expectation", "action"])
        self.registry.register(CellCollector([
            self.quality_checked, self.quality_failed,
            self.rpc_seconds, self.statements, self.stream_rows, self.stream_bytes, self.append_requests,
            self.append_rows, self.append_bytes, self.append_seconds, self.commits, self.group_size, self.feed_lag,
            self.feed_replay_lag, self.commit_rows, self.statement_seconds, self.maintenance_runs,
        ]))
        # Called before each exposition (the query log writes its pending lines and counts).
        self.before_scrape: list[Callable[[], None]] = []

    # -- events (one shard lookup and a few list additions each: metric_cells) --------------

    def observe_rpc(self, method: str, status: str, seconds: float) -> None:
        if self.enabled:
            self.rpc_seconds.observe((method, status), seconds)

    def streamed(self, rows: int, nbytes: int) -> None:
        if self.enabled:
            self.stream_rows.inc((), rows)
            self.stream_bytes.inc((), nbytes)

    def statement(self, kind: str, status: str, seconds: float | None = None) -> None:
        if self.enabled:
            self.statements.inc((kind, status))
            if seconds is not None:
                self.statement_seconds.observe((), seconds)

    def appended(self, status: str, rows: int = 0, nbytes: int = 0, seconds: float | None = None) -> None:
        if not self.enabled:
            return
        self.append_requests.inc((status,))
        if status == "OK":
            self.append_rows.inc((), rows)
            self.append_bytes.inc((), nbytes)
            if seconds is not None:
                self.append_seconds.observe((), seconds)

    def record_quality(self, table: str, quality: dict[str, Any]) -> None:
        """One append's quality gate results (``catalog.expectations.summary``)."""
        if not self.enabled:
            return
        for item in quality.get("assertions", []):
            labels = (table, str(item.get("name")), str(item.get("action")))
            self.quality_checked.inc(labels, int(item.get("checked_rows", 0)))
            if item.get("failed_rows"):
                self.quality_failed.inc(labels, int(item["failed_rows"]))

    def on_commit(self, record: CommitRecord) -> None:
        """A commit-hub listener (runs under the commit lock: counters only)."""
        if not self.enabled:
            return
        self.commits.inc((record.operation,))
        if not is_maintenance(record):
            if record.added_rows:
                self.commit_rows.inc(("added",), record.added_rows)
            if record.deleted_rows:
                self.commit_rows.inc(("deleted",), record.deleted_rows)
        if record.operation == "append":
            self.group_size.observe((), int(record.extra.get("group_size", 1) or 1))

    def delivered(self, committed_at_us: int, live: bool = True) -> None:
        """An event batch was written to a commits.v1 stream; ``live``: published to it as the
        commit landed (else read from the log: counted apart, see ``feed_replay_lag``)."""
        if self.enabled:
            (self.feed_lag if live else self.feed_replay_lag).observe((), max(0.0, time.time() - committed_at_us / 1e6))

    def maintained(self, status: str) -> None:
        if self.enabled:
            self.maintenance_runs.inc((status,))

    # -- exposition ---------------------------------------------------------------------------

    def add_levels(self, collector: Collector) -> None:
        self.registry.register(collector)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every family."""
        for hook in self.before_scrape:
            hook()
        return bytes(generate_latest(self.registry))


def rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for the server's RPC entry points: ``errors.guard`` (every exception leaves
    mapped) plus one latency observation by method and status on ``self.metrics``.

    The time is the handler's: for DoGet that is until the stream is handed to gRPC (the
    stream itself is counted in rows and bytes, and in the query log).
    """
    method = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any) -> Any:
        start = time.perf_counter()
        status = "OK"
        try:
            return fn(self, *args)
        except Exception as exc:  # deliberately total, as errors.guard
            status = errors.status_of(exc)
            errors.raise_for_flight(exc)
        finally:
            self.metrics.observe_rpc(method, status, time.perf_counter() - start)

    return wrapper


class LiveCollector(Collector):
    """Levels read from the components at scrape time (nothing to maintain on the hot path).

    Args:
        started: The server's start time (Unix seconds).
        gauges: name -> (help, read function returning a number or {label value: number},
            label name for the dict form).
    """

    def __init__(self, started: float, gauges: dict[str, tuple[str, Callable[[], Any], str | None]]) -> None:
        self.started = started
        self.gauges = gauges

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families are known only when read; describe nothing (no auto-describe call)

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("icefloe_build_info", "The running version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield GaugeMetricFamily("icefloe_uptime_seconds", "Seconds since the server started",
                                value=time.time() - self.started)
        for name, (help_text, read, label) in self.gauges.items():
            try:
                value = read()
            except Exception:  # a closed catalog or a component mid-shutdown: leave it out
                continue
            if label is None:
                yield GaugeMetricFamily(name, help_text, value=float(value))
                continue
            family = GaugeMetricFamily(name, help_text, labels=[label])
            for key, number in value.items():
                family.add_metric([key], float(number))
            yield family


def folder_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (RocksDB's SST files, logs and manifests)."""
    total = 0
    for entry in Path(path).rglob("*"):
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            continue  # compaction removed it meanwhile
    return total
