"""Threads committing to one table through one shared RocksCatalog: no lost update."""

from __future__ import annotations

import threading

from catalog_testlib import SCHEMA, rows
from pyiceberg.exceptions import CommitFailedException

from catalog import RocksCatalog

THREADS = 4
APPENDS_PER_THREAD = 8
ROWS = 5


def _run_writers(rocks: RocksCatalog, retry: bool) -> tuple[list[int], int, list[BaseException]]:
    """Every thread appends its own id range; returns (landed ids, conflicts raised, errors)."""
    landed: list[int] = []
    conflicts = 0
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def writer(worker: int) -> None:
        nonlocal conflicts
        table = rocks.load_table("ns.t")
        start.wait()
        try:
            for i in range(APPENDS_PER_THREAD):
                first = (worker * APPENDS_PER_THREAD + i) * ROWS
                for _ in range(50):
                    try:
                        table.append(rows(first, ROWS))
                    except CommitFailedException:
                        with lock:
                            conflicts += 1
                        table.refresh()
                        if retry:
                            continue
                        break
                    with lock:
                        landed.extend(range(first, first + ROWS))
                    break
        except BaseException as exc:  # surfaced by the test, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return landed, conflicts, errors


def _check_log_and_history(rocks: RocksCatalog, expected_appends: int) -> None:
    records = list(rocks.log.read(0))
    # Contiguous: seq 1..head, no gaps, nothing after head.
    assert [r.seq for r in records] == list(range(1, rocks.log.head() + 1))
    appends = [r for r in records if r.operation == "append"]
    assert len(appends) == expected_appends
    assert len(records) == expected_appends + 1  # + the create
    # Linear history: every append's parent is the snapshot the previous append created.
    assert appends[0].parent_snapshot_id is None
    for previous, record in zip(appends, appends[1:], strict=False):
        assert record.parent_snapshot_id == previous.snapshot_id
    table = rocks.load_table("ns.t")
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == appends[-1].snapshot_id


def test_threads_with_retry_lose_nothing(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    rocks.create_table("ns.t", SCHEMA, properties={"commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "20"})
    landed, _, errors = _run_writers(rocks, retry=True)
    assert errors == []
    expected = list(range(THREADS * APPENDS_PER_THREAD * ROWS))
    assert sorted(landed) == expected
    scanned = rocks.load_table("ns.t").scan().to_arrow().column("id").to_pylist()
    assert sorted(scanned) == expected  # exact: no lost and no duplicated rows
    _check_log_and_history(rocks, THREADS * APPENDS_PER_THREAD)


def test_threads_without_retry_conflicts_are_raised_not_lost(rocks: RocksCatalog) -> None:
    """With pyiceberg's retry off, each lost race is a CommitFailedException and commits nothing."""
    rocks.create_namespace("ns")
    rocks.create_table("ns.t", SCHEMA, properties={"commit.retry.num-retries": "0"})
    landed, conflicts, errors = _run_writers(rocks, retry=False)
    assert errors == []
    scanned = rocks.load_table("ns.t").scan().to_arrow().column("id").to_pylist()
    assert sorted(scanned) == sorted(landed)
    assert len(landed) // ROWS + conflicts == THREADS * APPENDS_PER_THREAD
    _check_log_and_history(rocks, len(landed) // ROWS)
