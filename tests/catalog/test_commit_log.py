"""Commit-log API: retention and holds, expired cursors, and the hub's lagging fallback."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from catalog_testlib import SCHEMA, rows

from catalog import CommitHub, CursorExpiredError, RocksCatalog


def _appends(cat: RocksCatalog, count: int, table: str = "ns.t") -> None:
    t = cat.load_table(table)
    for i in range(count):
        t.append(rows(i, 1))


@pytest.fixture
def logged(tmp_path: Path) -> RocksCatalog:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"), **{"commit-log.retain-count": "5"})
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    return cat


def test_read_after_and_limit(logged: RocksCatalog) -> None:
    _appends(logged, 6)
    assert logged.log.head() == 7 and logged.log.log_start() == 1
    assert [r.seq for r in logged.log.read(3)] == [4, 5, 6, 7]
    assert [r.seq for r in logged.log.read(3, limit=2)] == [4, 5]
    assert list(logged.log.read(7)) == []
    assert logged.log.get(4) is not None and logged.log.get(8) is None


def test_retain_count_and_cursor_expired(logged: RocksCatalog) -> None:
    _appends(logged, 11)  # seq 1..12
    assert logged.trim_commit_log() == 8  # newest 5 kept: 8..12
    assert logged.log.log_start() == 8
    assert [r.seq for r in logged.log.read(7)] == [8, 9, 10, 11, 12]
    with pytest.raises(CursorExpiredError, match="cursor expired") as info:
        list(logged.log.read(6))
    assert info.value.log_start == 8
    assert logged.log.get(7) is None
    # Survives reopening, and trimming again changes nothing.
    warehouse = logged.warehouse
    logged.close()
    reopened = RocksCatalog("again", warehouse=warehouse, **{"commit-log.retain-count": "5"})
    assert reopened.log.log_start() == 8 and reopened.log.head() == 12
    assert reopened.trim_commit_log() == 8
    _appends(reopened, 1)
    assert [r.seq for r in reopened.log.read(7)] == [8, 9, 10, 11, 12, 13]
    reopened.close()


def test_retain_age(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"), **{"commit-log.retain-age-s": "3600"})
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    _appends(cat, 3)  # seq 1..4
    middle = cat.log.get(3)
    assert middle is not None
    # Pretend it is an hour after commit 3: records 1..2 are older than an hour.
    assert cat.trim_commit_log(now_us=middle.committed_at_us + 3600 * 1_000_000) == 3
    assert cat.trim_commit_log() == 3  # now: nothing is an hour old
    cat.close()


def test_bad_retention_property(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"), **{"commit-log.retain-count": "lots"})
    with pytest.raises(ValueError, match="commit-log.retain-count"):
        cat.trim_commit_log()
    cat.close()


def test_holds_stop_trimming(logged: RocksCatalog) -> None:
    _appends(logged, 11)  # seq 1..12
    logged.log.set_hold("lineage", 3)  # lineage has emitted up to 3: keep 4..
    assert logged.trim_commit_log() == 4
    assert [r.seq for r in logged.log.read(3)][0] == 4
    logged.log.set_hold("lineage", 9)
    logged.log.set_hold("other", 6)
    assert logged.log.holds() == {"lineage": 9, "other": 6}
    assert logged.trim_commit_log() == 7
    logged.log.release_hold("other")
    assert logged.trim_commit_log() == 8  # now the count limit decides
    with pytest.raises(CursorExpiredError):
        logged.log.set_hold("late", 2)
    with pytest.raises(ValueError):
        logged.log.set_hold("future", 99)
    # Holds are durable.
    warehouse = logged.warehouse
    logged.close()
    reopened = RocksCatalog("again", warehouse=warehouse)
    assert reopened.log.holds() == {"lineage": 9}
    reopened.close()


def test_trim_on_read_only_catalog_refused(logged: RocksCatalog, tmp_path: Path) -> None:
    from catalog import CatalogReadOnlyError

    reader = RocksCatalog("r", warehouse=logged.warehouse)
    try:
        assert reader.read_only
        with pytest.raises(CatalogReadOnlyError):
            reader.trim_commit_log()
    finally:
        reader.close()
        logged.close()


# -- subscriptions -------------------------------------------------------------------------


def _drain(sub: object, until: int, timeout: float = 10.0) -> list[int]:
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while (not seen or seen[-1] < until) and time.monotonic() < deadline:
        seen.extend(r.seq for r in sub.poll(timeout=0.05))  # type: ignore[attr-defined]
    return seen


def test_lagging_subscriber_catches_up_from_log(logged: RocksCatalog) -> None:
    logged.hub.queue_size = 2
    sub = logged.hub.subscribe(after=logged.log.head())  # after the create: seq 1
    start = time.monotonic()
    _appends(logged, 12)  # nobody polls: the queue overflows, writers go on
    assert time.monotonic() - start < 60
    assert sub.lagging
    first = sub.poll(timeout=0.1, limit=5)
    assert [r.seq for r in first] == [2, 3, 4, 5, 6]
    seen = [r.seq for r in first] + _drain(sub, 13)
    assert seen == list(range(2, 14))  # no gap, no duplicate
    _appends(logged, 2)
    assert _drain(sub, 15) == [14, 15]
    sub.close()
    assert logged.hub.subscriber_count == 0


def test_subscriber_with_concurrent_writers(logged: RocksCatalog) -> None:
    logged.hub.queue_size = 3
    logged.create_table("ns.u", SCHEMA)  # seq 2
    sub = logged.hub.subscribe(after=0)
    writers = [threading.Thread(target=_appends, args=(logged, 10, name)) for name in ("ns.t", "ns.u")]
    for w in writers:
        w.start()
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (any(w.is_alive() for w in writers) or seen[-1:] != [logged.log.head()]):
        seen.extend(r.seq for r in sub.poll(timeout=0.01, limit=4))
        time.sleep(0.005)  # a slow subscriber
    for w in writers:
        w.join()
    assert seen == list(range(1, logged.log.head() + 1))


def test_out_of_order_publication_is_delivered_in_order(logged: RocksCatalog) -> None:
    """A caught-up subscriber waiting on its queue gets records out of order: poll still
    yields each seq once, in order (the durable log fills the gap)."""
    hub = CommitHub(logged.log)  # a hub we publish to by hand
    sub = hub.subscribe(after=logged.log.head())  # caught up at seq 1: poll waits on the queue
    seen: list[int] = []

    def subscriber() -> None:
        seen.extend(_drain(sub, 3))

    thread = threading.Thread(target=subscriber)
    thread.start()
    time.sleep(0.2)  # the subscriber is now blocked on its empty queue
    _appends(logged, 2)  # seq 2 and 3 land in the log
    r2, r3 = logged.log.get(2), logged.log.get(3)
    assert r2 and r3
    hub.publish(r3)
    hub.publish(r2)
    thread.join(timeout=30)
    assert seen == [2, 3]


def test_subscription_cursor_expired(logged: RocksCatalog) -> None:
    sub = logged.hub.subscribe(after=0)
    logged.hub.queue_size = 1
    lagging = logged.hub.subscribe(after=1)
    _appends(logged, 10)
    logged.trim_commit_log()
    with pytest.raises(CursorExpiredError):
        sub.poll(timeout=0.01)
    with pytest.raises(CursorExpiredError):
        lagging.poll(timeout=0.01)
