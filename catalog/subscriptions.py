"""In-process fan-out of landed commits to subscribers.

Writers publish each record after its batch is durable and never wait: every subscriber has a
bounded queue, and a subscriber whose queue is full is marked *lagging* instead. A lagging
subscriber drops its queue and catches up from the durable commit log, then goes back to the
queue; sequence numbers make the seam exact (anything at or below the last delivered seq is
skipped).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from catalog.commit_log import CommitLog, CommitRecord

logger = logging.getLogger("icefloe.catalog.subscriptions")


class TooManySubscribersError(RuntimeError):
    pass


class Subscription:
    """One subscriber's view of the commit stream, starting after a given sequence."""

    def __init__(self, hub: CommitHub, after: int, queue_size: int) -> None:
        self._hub = hub
        self._queue: queue.Queue[CommitRecord] = queue.Queue(maxsize=queue_size)
        self._lagging = threading.Event()
        # While paused, another component delivers this subscriber's records (the feed's
        # fan-out) and nothing is queued here.
        self._paused = False
        self.last_seq = after
        self.closed = False
        # How often this subscriber overflowed its queue and caught up from the log.
        self.catch_ups = 0
        # Whether the last ``poll`` read the durable log (a replay or a catch-up) rather than
        # taking records published live: the feed keeps the two delivery lags apart.
        self.last_poll_from_log = False

    def _offer(self, record: CommitRecord) -> None:
        if self._paused or self._lagging.is_set():
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._lagging.set()

    @property
    def lagging(self) -> bool:
        return self._lagging.is_set()

    def mark_lagging(self) -> None:
        """Note that this subscriber fell behind; its next ``poll`` catches up from the log."""
        self._lagging.set()

    def pause(self) -> None:
        """Stop queueing records: someone else delivers them until ``resume``."""
        self._paused = True
        self._drain()

    def resume(self, last_seq: int) -> None:
        """Take over again after ``last_seq``; the next ``poll`` reads what follows from the log."""
        self.last_seq = last_seq
        self._lagging.set()  # before unpausing, so nothing is queued ahead of the log read
        self._paused = False

    def poll(self, timeout: float, limit: int = 1024) -> list[CommitRecord]:
        """Return the next records after ``last_seq`` (possibly none when ``timeout`` passes).

        Raises:
            CursorExpiredError: If catching up needs records the log no longer holds.
        """
        if self._lagging.is_set():
            # Dropped records are in the durable log; clear the flag first so that anything
            # published from now on is queued (and deduplicated below if also read here).
            self._drain()
            self._lagging.clear()
            self.catch_ups += 1
            records = list(self._hub.log.read(self.last_seq, limit=limit))
            self.last_poll_from_log = True
        elif self.last_seq < self._hub.log.head():
            # Replay (or a record landed but not yet published): the log is the source.
            records = list(self._hub.log.read(self.last_seq, limit=limit))
            self.last_poll_from_log = True
        else:
            self.last_poll_from_log = False
            records = []
            try:
                records.append(self._queue.get(timeout=timeout))
            except queue.Empty:
                return []
            while len(records) < limit:
                try:
                    records.append(self._queue.get_nowait())
                except queue.Empty:
                    break
        fresh = sorted((r for r in records if r.seq > self.last_seq), key=lambda r: r.seq)
        if any(r.seq != self.last_seq + 1 + i for i, r in enumerate(fresh)):
            # The queue skipped a seq (published out of order, or a record is still being
            # published): every landed record is in the log, which is contiguous.
            fresh = list(self._hub.log.read(self.last_seq, limit=limit))
            self.last_poll_from_log = True
        if fresh:
            self.last_seq = fresh[-1].seq
        return fresh

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._hub._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommitHub:
    """Publishes landed commits to in-process subscribers without ever blocking the writer."""

    def __init__(self, log: CommitLog, max_subscribers: int = 1000, queue_size: int = 1024) -> None:
        self.log = log
        self.max_subscribers = max_subscribers
        self.queue_size = queue_size
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[CommitRecord], None]] = []

    def subscribe(self, after: int) -> Subscription:
        """Register a subscriber that will see every record with ``seq > after``.

        Registration happens before any log read, so nothing published meanwhile is missed.

        Raises:
            TooManySubscribersError: When ``max_subscribers`` are already registered.
        """
        sub = Subscription(self, after, self.queue_size)
        with self._lock:
            if len(self._subscribers) >= self.max_subscribers:
                raise TooManySubscribersError(f"subscriber limit reached ({self.max_subscribers})")
            self._subscribers.add(sub)
        return sub

    def add_listener(self, listener: Callable[[CommitRecord], None]) -> None:
        """Call ``listener`` for every published record, in seq order.

        It runs on the committing thread while the catalog's commit lock is held, so it must
        not block or do I/O: hand the record to a queue (or read the durable log instead).
        """
        self._listeners.append(listener)

    def publish(self, record: CommitRecord) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub._offer(record)
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # a listener bug must never fail a landed commit
                logger.exception("commit listener failed for seq %d", record.seq)

    def subscriptions(self) -> list[Subscription]:
        """The registered subscriptions (a snapshot, for monitoring and tests)."""
        with self._lock:
            return list(self._subscribers)

    @property
    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)
