"""Fan-out of live commits to caught-up commits.v1 streams by a few worker threads.

With one thread per stream, each commit woke every stream's thread: with 100 subscribers that
was 100 thread wake-ups and GIL hand-offs per commit, and the last stream heard of a commit
tens of milliseconds after the first (bench_feed). A stream that has caught up with the log is
therefore *attached* here instead: its handler thread parks, and a small pool of workers
writes each commit's event batch (built once, shared) to every attached stream. The gRPC write
runs in C++ without the GIL, so the workers use every core.

No client may hold the workers up. A gRPC write to a client that stopped reading blocks until
it reads again, so a watchdog detaches any stream whose write has taken longer than
``stall_s`` and starts a replacement worker; the stuck worker leaves the pool when its write
returns, and the stream's own handler thread takes over, catching up from the durable log like
any lagging subscriber. A stream also goes back to its handler when it falls further behind
than the recent records kept here.

Idle attached streams cost one thread in all, not one each: the same timer thread that watches
for stalls queues every attached stream's heartbeats (from a heap of due times) and checks,
a few times a second, whether a stream's client cancelled or the server is stopping. The
handler threads of attached streams sleep until the fan-out lets go of their stream. No
heartbeat is queued to a stream whose previous write has not returned: a client that stopped
reading gets nothing more piled on, and its next heartbeat is due a full interval after that
write.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from catalog.commit_log import CommitRecord
from catalog.subscriptions import CommitHub

logger = logging.getLogger("icefloe.feed.fanout")

# Recent records kept for attached streams; one further behind returns to its handler thread.
RING_SIZE = 1024
# Most records written to one stream in one turn (and so per event batch).
TURN_LIMIT = 512
# How often the timer asks every attached stream whether it has ended (client cancelled,
# server stopping): the longest an attached stream's handler sleeps past its end.
LIVENESS_S = 0.2
# Heartbeats due within this of each other are queued in one timer wake-up.
HEARTBEAT_SLACK_S = 0.002


class LiveStream(Protocol):
    """What a worker needs from a stream: write these records (and maybe a heartbeat)."""

    def deliver(self, records: list[CommitRecord], heartbeat: bool, head: int) -> bool:
        """Send what ``records`` mean for this stream; if nothing was sent and ``heartbeat``,
        send a heartbeat reporting ``head``. Return whether anything was written.

        Raises:
            Exception: Writing failed (the client is gone); the stream is handed back.
        """
        ...


class Sink:
    """An attached stream's place in the fan-out (all fields guarded by the fan-out's lock)."""

    def __init__(
        self,
        stream: LiveStream,
        last_seq: int,
        on_stall: Callable[[], None],
        heartbeat_s: float | None,
        ended: Callable[[], bool] | None,
    ) -> None:
        self.stream = stream
        # Every record up to here has been delivered (or did not match).
        self.last_seq = last_seq
        self.attached = True
        self.busy = False  # a worker is writing to it
        self.queued = False  # waiting in the ready queue
        self.heartbeat_due = False
        self.stalled = False
        self.error: BaseException | None = None
        self.last_sent = time.monotonic()
        self.on_stall = on_stall
        self.heartbeat_s = heartbeat_s  # None: no heartbeats
        self.ended = ended  # asked by the timer; True releases the stream to its handler
        # Set once the fan-out has let go of the stream: its handler thread owns it again.
        self.released = threading.Event()


class _Worker:
    def __init__(self) -> None:
        self.retired = False
        self.sink: Sink | None = None
        self.started = 0.0


class FanOut:
    """Delivers every published commit to the attached streams, in order, once each."""

    def __init__(self, hub: CommitHub, workers: int = 2, stall_s: float = 0.1, ring_size: int = RING_SIZE) -> None:
        self._workers_wanted = max(1, workers)
        self.stall_s = stall_s
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # ready sinks, or closing
        self._writes = threading.Condition(self._lock)  # wakes the timer: a write began, an earlier heartbeat, closing
        self._idle = threading.Condition(self._lock)  # a sink stopped being busy
        self._detaching = 0  # handler threads waiting on ``_idle``: no notify per write without one
        self._ring: deque[CommitRecord] = deque(maxlen=ring_size)
        self._head = hub.log.head()
        self._sinks: dict[Sink, None] = {}  # insertion-ordered set
        self._ready: deque[Sink] = deque()
        self._workers: list[_Worker] = []
        self._closed = False
        self._timer: threading.Thread | None = None
        self._timer_tracks_writes = False  # else a worker starting a write wakes it
        self._timer_wakes_at = 0.0  # when the timer's current wait ends
        # (due, tie-breaker, sink): one entry per attached sink with heartbeats; an entry is
        # checked against the sink's last write when it comes due (lazy re-scheduling).
        self._heartbeats: list[tuple[float, int, Sink]] = []
        self._tiebreak = itertools.count()
        self._next_liveness = 0.0
        # Streams detached because a write stalled (for monitoring and tests).
        self.stalls = 0
        hub.add_listener(self._on_commit)

    # -- publishing (the committing thread, under the catalog's commit lock: never blocks) --

    def _on_commit(self, record: CommitRecord) -> None:
        with self._lock:
            if record.seq != self._head + 1:
                # Not contiguous with what is kept (cannot happen while every commit is
                # published in order); attached streams behind it catch up from the log.
                self._ring.clear()
            self._ring.append(record)
            self._head = record.seq
            for sink in self._sinks:
                if not (sink.queued or sink.busy):
                    sink.queued = True
                    self._ready.append(sink)
            if self._ready:
                self._work.notify_all()

    # -- attaching and detaching (a stream's handler thread) -------------------------------

    def attach(
        self,
        stream: LiveStream,
        last_seq: int,
        on_stall: Callable[[], None],
        heartbeat_s: float | None = None,
        ended: Callable[[], bool] | None = None,
    ) -> Sink | None:
        """Hand ``stream`` (which has delivered everything up to ``last_seq``) to the workers.

        Args:
            stream: Written by the workers until released.
            last_seq: Everything up to here has been delivered.
            on_stall: Called (under the fan-out's lock) when a write to it stalls.
            heartbeat_s: Queue a heartbeat when nothing was written for this long.
            ended: Asked every ``LIVENESS_S``; True releases the stream to its handler.

        Returns:
            The stream's sink: ``released`` is set once the fan-out has let go of it. None
            when the records after ``last_seq`` are no longer kept here, or the fan-out is
            closed: the handler keeps reading the log itself and may try again.
        """
        with self._lock:
            if self._closed or self._records_after(last_seq) is None:
                return None
            sink = Sink(stream, last_seq, on_stall, heartbeat_s, ended)
            self._sinks[sink] = None
            if heartbeat_s is not None:
                self._schedule_heartbeat(sink, sink.last_sent + heartbeat_s)
            if last_seq < self._head:
                sink.queued = True
                self._ready.append(sink)
                self._work.notify_all()
            self._start_workers()
            return sink

    def detach(self, sink: Sink) -> None:
        """Take the stream back; returns once no worker is writing to it."""
        with self._lock:
            self._release(sink)
            self._detaching += 1
            try:
                while sink.busy:
                    self._idle.wait()
            finally:
                self._detaching -= 1

    def close(self) -> None:
        """Stop the workers (a worker stuck in a write leaves when the write returns)."""
        with self._lock:
            self._closed = True
            for sink in list(self._sinks):
                self._release(sink)
            self._work.notify_all()
            self._writes.notify_all()

    @property
    def attached_count(self) -> int:
        with self._lock:
            return len(self._sinks)

    # -- internals (callers hold the lock) ---------------------------------------------------

    def _release(self, sink: Sink) -> None:
        if sink.attached:
            sink.attached = False
            self._sinks.pop(sink, None)
        if not sink.busy:
            sink.released.set()

    def _records_after(self, seq: int) -> list[CommitRecord] | None:
        """The kept records after ``seq`` (at most ``TURN_LIMIT``), or None if some are gone."""
        if seq >= self._head:
            return []
        if not self._ring or self._ring[0].seq > seq + 1:
            return None
        newer: list[CommitRecord] = []
        for record in reversed(self._ring):
            if record.seq <= seq:
                break
            newer.append(record)
        newer.reverse()
        return newer[:TURN_LIMIT]

    def _start_workers(self) -> None:
        active = sum(1 for w in self._workers if not w.retired)
        for _ in range(self._workers_wanted - active):
            worker = _Worker()
            self._workers.append(worker)
            threading.Thread(target=self._work_loop, args=(worker,), name="icefloe-feed-fanout", daemon=True).start()
        if self._timer is None:
            self._timer = threading.Thread(target=self._time, name="icefloe-feed-timer", daemon=True)
            self._timer.start()

    def _schedule_heartbeat(self, sink: Sink, due: float) -> None:
        heapq.heappush(self._heartbeats, (due, next(self._tiebreak), sink))
        if due < self._timer_wakes_at:
            self._writes.notify()

    # -- workers -----------------------------------------------------------------------------

    def _work_loop(self, worker: _Worker) -> None:
        # One lock hold per write: the outcome of the write just made and the choice of the
        # next stream happen together (two holds per write, contended by every worker, were
        # a third of a delivery's cost at 100 streams).
        done: tuple[Sink, list[CommitRecord], bool, BaseException | None] | None = None
        while True:
            with self._lock:
                if done is not None:
                    self._finish(worker, *done)
                job = self._next_job(worker)
            if job is None:
                return
            sink, records, heartbeat = job
            error: BaseException | None = None
            try:
                sent = sink.stream.deliver(records, heartbeat, records[-1].seq if records else sink.last_seq)
            except Exception as exc:  # the client went away (or a bug): its handler raises it
                error, sent = exc, False
            done = (sink, records, sent, error)

    def _next_job(self, worker: _Worker) -> tuple[Sink, list[CommitRecord], bool] | None:
        """Wait for a stream with something to send and mark it busy; None: the worker leaves."""
        while True:
            while not self._ready and not (self._closed or worker.retired):
                self._work.wait()
            if self._closed or worker.retired:
                self._workers.remove(worker)
                return None
            sink = self._ready.popleft()
            sink.queued = False
            if not sink.attached:
                continue
            records = self._records_after(sink.last_seq)
            if records is None:
                self._release(sink)  # too far behind: its handler reads the log
                continue
            heartbeat, sink.heartbeat_due = sink.heartbeat_due, False
            if not records and not heartbeat:
                continue
            sink.busy = True
            worker.sink, worker.started = sink, time.monotonic()
            if not self._timer_tracks_writes:  # wake it only to start timing, not per write
                self._timer_tracks_writes = True
                self._writes.notify()
            return sink, records, heartbeat

    def _finish(self, worker: _Worker, sink: Sink, records: list[CommitRecord], sent: bool,
                error: BaseException | None) -> None:
        """Record the outcome of ``worker``'s write to ``sink``."""
        worker.sink = None
        sink.busy = False
        if records:
            sink.last_seq = records[-1].seq
        if sent:
            sink.last_sent = time.monotonic()
        if error is not None:
            sink.error = error
            self._release(sink)
        elif not sink.attached:
            sink.released.set()
        elif (sink.last_seq < self._head or sink.heartbeat_due) and not sink.queued:
            sink.queued = True
            self._ready.append(sink)
            self._work.notify()
        if self._detaching:
            self._idle.notify_all()

    def _time(self) -> None:
        """The fan-out's one timer: stalled writes, heartbeats and ended streams."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                wake = self._check_stalls(now)
                wake = min(wake, self._queue_heartbeats(now))
                if now >= self._next_liveness:
                    self._release_ended()
                    self._next_liveness = now + LIVENESS_S
                wake = min(wake, self._next_liveness)
                self._timer_wakes_at = wake
                self._writes.wait(timeout=max(0.001, wake - time.monotonic()))

    def _check_stalls(self, now: float) -> float:
        """Detach streams whose write has stalled, keep the pool at full strength, and return
        when the oldest write still going would count as stalled (``inf`` if none)."""
        writing = [w for w in self._workers if w.sink is not None and not w.retired]
        self._timer_tracks_writes = bool(writing)
        for worker in writing:
            sink = worker.sink
            assert sink is not None
            if now - worker.started > self.stall_s:
                worker.retired = True
                sink.stalled = True
                self.stalls += 1
                self._release(sink)
                sink.on_stall()
                logger.debug("feed stream stalled in a write; its handler takes it back")
        if any(w.retired for w in writing):
            self._start_workers()
        started = [w.started for w in writing if not w.retired]
        return max(now + 0.005, min(started) + self.stall_s) if started else float("inf")

    def _queue_heartbeats(self, now: float) -> float:
        """Queue the heartbeats that are due; return when the next one is."""
        heap = self._heartbeats
        while heap and heap[0][0] <= now + HEARTBEAT_SLACK_S:
            _, _, sink = heapq.heappop(heap)
            if not sink.attached or sink.heartbeat_s is None:
                continue  # its entry leaves the heap with it
            due = sink.last_sent + sink.heartbeat_s
            if due <= now + HEARTBEAT_SLACK_S:
                if not (sink.busy or sink.queued):
                    sink.heartbeat_due = True
                    sink.queued = True
                    self._ready.append(sink)
                    self._work.notify()
                # Else nothing: when busy, a write has not returned (the client may have
                # stopped reading) and nothing is piled on; when queued, records are about to
                # be written anyway. Either way the next one is due an interval from now.
                due = now + sink.heartbeat_s
            heapq.heappush(heap, (due, next(self._tiebreak), sink))
        return heap[0][0] if heap else float("inf")

    def _release_ended(self) -> None:
        for sink in list(self._sinks):
            if sink.ended is not None and sink.ended():
                self._release(sink)
