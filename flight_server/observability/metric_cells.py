"""Counters and histograms sharded per thread: no lock and no allocation on the hot path.

``prometheus_client``'s own ``Counter`` / ``Histogram`` take a mutex per increment (a histogram
observation takes two, after a Python loop over the buckets), and ``labels()`` validates,
hashes and locks on every call. Here each OS thread owns a shard: a dict from label values to a
list of numbers (a count per bucket, then the sum), created once per thread and label set, then
only indexed and added to. The bucket is found by ``bisect`` (C). Shards are keyed by
``threading.get_ident()``, not held in a ``threading.local``: gRPC's threads get a fresh Python
thread state, and so fresh thread-locals, on every call. Two live threads never share an ident,
so one thread at a time writes a shard and no update is lost; a scrape sums the shards (it may
see a shard one update behind, which the next scrape catches up on).

The families are exposed by ``CellCollector`` with the same names, types, labels and buckets
as the ``prometheus_client`` families they replace.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

Labels = tuple[str, ...]


class _Family:
    """The shards of one family; ``shard()`` is this thread's dict of label values -> cells."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str], width: int) -> None:
        self.name, self.help, self.labels, self.width = name, help_text, tuple(labels), width
        self._shards: dict[int, dict[Labels, list[float]]] = {}
        self._lock = threading.Lock()  # taken once per thread (a new shard) and per scrape

    def cell(self, labels: Labels) -> list[float]:
        ident = threading.get_ident()
        shard = self._shards.get(ident)
        if shard is None:
            with self._lock:
                shard = self._shards.setdefault(ident, {})
        cell = shard.get(labels)
        if cell is None:
            cell = shard[labels] = [0.0] * self.width
        return cell

    def totals(self) -> dict[Labels, list[float]]:
        with self._lock:
            shards = list(self._shards.values())
        out: dict[Labels, list[float]] = {}
        for shard in shards:
            for labels, cell in list(shard.items()):
                total = out.setdefault(labels, [0.0] * self.width)
                for i, value in enumerate(list(cell)):
                    total[i] += value
        return out


class CellCounter(_Family):
    """A counter family (exposed as ``<name>_total``)."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels, 1)

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        self.cell(labels)[0] += amount

    def value(self, labels: Labels = ()) -> float:
        return self.totals().get(labels, [0.0])[0]

    def metric(self) -> Metric:
        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for labels, cell in sorted(self.totals().items()):
            family.add_metric(list(labels), cell[0])
        return family


class CellHistogram(_Family):
    """A histogram family with fixed upper bounds (``le``, plus ``+Inf``)."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str], buckets: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in buckets)
        super().__init__(name, help_text, labels, len(self.bounds) + 2)  # buckets, +Inf, sum

    def observe(self, labels: Labels, value: float) -> None:
        cell = self.cell(labels)
        cell[bisect.bisect_left(self.bounds, value)] += 1  # first bound >= value: Prometheus' le
        cell[-1] += value

    def metric(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        for labels, cell in sorted(self.totals().items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*self.bounds, math.inf), cell[:-1], strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == math.inf else _le(bound), cumulative))
            family.add_metric(list(labels), buckets, sum_value=cell[-1])
        return family


def _le(bound: float) -> str:
    return repr(bound)  # prometheus_client writes its float bounds the same way (0.0005, 1.0, ...)


class CellCollector(Collector):
    """Exposes cell families in a ``CollectorRegistry``."""

    def __init__(self, families: Sequence[CellCounter | CellHistogram]) -> None:
        self.families = list(families)

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.metric()
