"""The lock-free metric cells count exactly under concurrent threads and expose exactly what
``prometheus_client``'s own families expose for the same observations."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from flight_server.observability.metric_cells import CellCollector, CellCounter, CellHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def _exposed(*families: CellCounter | CellHistogram) -> bytes:
    registry = CollectorRegistry()
    registry.register(CellCollector(families))
    return bytes(generate_latest(registry))


def test_cells_expose_what_prometheus_client_exposes() -> None:
    reference = CollectorRegistry()
    ref_hist = Histogram("t_seconds", "help", ["method"], buckets=BUCKETS, registry=reference)
    ref_count = Counter("t_calls", "calls", ["status"], registry=reference)
    hist = CellHistogram("t_seconds", "help", ["method"], BUCKETS)
    count = CellCounter("t_calls", "calls", ["status"])
    for value in (0.0, 0.001, 0.0011, 0.01, 0.5, 1.0, 7.0):  # bounds themselves fall in their bucket (le)
        ref_hist.labels("get").observe(value)
        hist.observe(("get",), value)
    ref_hist.labels("put").observe(0.02)
    hist.observe(("put",), 0.02)
    ref_count.labels("OK").inc(3)
    count.inc(("OK",), 3)
    ref_registry_text = bytes(generate_latest(reference)).decode()
    ours = _exposed(hist, count).decode()
    # prometheus_client also writes *_created series; everything else must be identical.
    expected = "\n".join(line for line in ref_registry_text.splitlines() if "_created" not in line)
    assert ours.strip() == expected.strip()


def test_concurrent_threads_lose_no_update() -> None:
    hist = CellHistogram("c_seconds", "help", ["m"], BUCKETS)
    count = CellCounter("c_rows", "rows")
    threads_n, per_thread = 8, 20_000
    start = threading.Barrier(threads_n)

    def work() -> None:
        start.wait()
        for i in range(per_thread):
            hist.observe(("x",), 0.005 if i % 2 else 0.5)
            count.inc((), 2)

    threads = [threading.Thread(target=work) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = threads_n * per_thread
    assert count.value() == 2 * total
    cell = hist.totals()[("x",)]
    assert cell[1] == total / 2 and cell[3] == total / 2 and sum(cell[:-1]) == total
    assert abs(cell[-1] - (total / 2) * (0.005 + 0.5)) < 1e-6 * total
