"""A call's context is never asked anything after the call ended.

pyarrow's ``ServerCallContext`` points at C++ state freed when the call ends. The query
watchdog asks a running query's context whether its client cancelled; a failed stream's reader
could outlive its call (held by a traceback cycle until the collector ran), and the watchdog
then read freed memory: the server died with SIGSEGV after a few queries that failed
mid-stream (CI, stop 27). These tests hold a query's registration past its call on a real
pyarrow Flight server and check what the watchdog does with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flight_server.engine.watchdog import Running, Watchdog
from flight_server.security.headers import MIDDLEWARE_KEY, HeadersMiddlewareFactory


class _Cursor:
    """Stands in for a DuckDB cursor: counts interrupts (the watchdog's only use of it)."""

    def __init__(self) -> None:
        self.interrupts = 0

    def interrupt(self) -> None:
        self.interrupts += 1


class _RecordingContext:
    """The real call context, with every ``is_cancelled`` noted (whether the call was over)."""

    def __init__(self, context: flight.ServerCallContext, ended: threading.Event) -> None:
        self._context = context
        self._ended = ended
        self.asked_after_end = 0
        self.asked = 0

    def get_middleware(self, key: str) -> Any:
        return self._context.get_middleware(key)

    def is_cancelled(self) -> bool:
        self.asked += 1
        if self._ended.is_set():
            self.asked_after_end += 1
            return False  # the real context is freed: asking it could crash this process
        return bool(self._context.is_cancelled())


class _EndedMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    def __init__(self, ended: threading.Event) -> None:
        self._ended = ended

    def call_completed(self, exception: BaseException | None) -> None:
        self._ended.set()


class _EndedFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, ended: threading.Event) -> None:
        self.ended = ended

    def start_call(self, info: Any, headers: Any) -> _EndedMiddleware:
        return _EndedMiddleware(self.ended)


class _Server(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet registers a query with the watchdog and, like a reader kept alive by a
    traceback, leaves it registered after the call."""

    def __init__(self, watchdog: Watchdog, ended: threading.Event, fail: bool) -> None:
        super().__init__("grpc://127.0.0.1:0", middleware={
            MIDDLEWARE_KEY: HeadersMiddlewareFactory(), "ended": _EndedFactory(ended),
        })
        self.watchdog = watchdog
        self.ended = ended
        self.fail = fail
        self.runs: list[tuple[Running, _RecordingContext, _Cursor]] = []

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        recording = _RecordingContext(context, self.ended)
        cursor = _Cursor()
        run = Running(None, cursor, recording, deadline=float("inf"))  # type: ignore[arg-type]
        self.watchdog.add(run)
        self.runs.append((run, recording, cursor))
        fail = self.fail

        def batches() -> Iterator[pa.RecordBatch]:
            yield pa.record_batch({"v": [1, 2, 3]})
            if fail:
                raise pa.ArrowInvalid("boom mid-stream")

        return flight.GeneratorStream(pa.schema([("v", pa.int64())]), batches())


@pytest.mark.parametrize("fail", [False, True], ids=["stream-ends", "stream-fails"])
def test_watchdog_never_asks_a_finished_calls_context(fail: bool) -> None:
    stopping = threading.Event()
    watchdog = Watchdog(stopping)
    ended = threading.Event()
    server = _Server(watchdog, ended, fail)
    try:
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        reader = client.do_get(flight.Ticket(b"t"))
        if fail:
            with pytest.raises(pa.ArrowException, match="boom mid-stream"):
                reader.read_all()
        else:
            assert reader.read_all().column("v").to_pylist() == [1, 2, 3]
        client.close()
        deadline = time.monotonic() + 10
        while not ended.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ended.is_set(), "the call never completed"
        (run, recording, cursor), = server.runs
        for _ in range(3):
            watchdog.watch_once(time.monotonic())
        # The query outlived its call: it is interrupted (nobody reads it any more) without its
        # dead context being asked anything, and no other query is disturbed.
        assert recording.asked_after_end == 0
        assert run.interrupted == "ended" and cursor.interrupts == 1
    finally:
        watchdog.close()
        server.shutdown()


def test_a_running_calls_cancel_is_still_seen() -> None:
    """The liveness check must not blind the watchdog: a call that runs is asked, and a
    client that cancels gets its query interrupted."""
    stopping = threading.Event()
    watchdog = Watchdog(stopping)
    ended = threading.Event()
    started = threading.Event()
    release = threading.Event()

    class Blocking(_Server):
        def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
            stream = super().do_get(context, ticket)
            started.set()
            release.wait(10)  # the call stays open while the watchdog looks
            return stream

    server = Blocking(watchdog, ended, fail=False)
    try:
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        done = threading.Thread(target=lambda: _swallow(lambda: client.do_get(flight.Ticket(b"t")).read_all()))
        done.start()
        assert started.wait(10)
        (run, recording, cursor), = server.runs
        watchdog.watch_once(time.monotonic())
        assert recording.asked >= 1 and run.interrupted is None  # alive, not cancelled
        release.set()
        done.join(10)
        client.close()
    finally:
        release.set()
        watchdog.close()
        server.shutdown()


def _swallow(fn: Any) -> None:
    try:
        fn()
    except Exception:  # the client's outcome is not what this test checks
        pass


@pytest.mark.parametrize("sql", [
    "SELECT i FROM range(300000) t(i)",
    "SELECT CASE WHEN i > 200000 THEN error('boom late') ELSE i END AS i FROM range(300000) t(i)",
], ids=["stream-ends", "stream-fails"])
def test_a_query_whose_reader_outlives_its_call_gives_its_slot_back(tmp_path: Any, sql: str) -> None:
    """A real engine's query, its reader kept past the call (as a traceback cycle kept it):
    the slot comes back when the call ends, not when the collector frees the reader, and
    freeing the reader afterwards is harmless."""
    import gc

    from catalog import RocksCatalog
    from flight_server.engine import Engine

    cat = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    engine = Engine(cat, query_timeout_s=30)
    kept: list[pa.RecordBatchReader] = []

    class Server(flight.FlightServerBase):  # type: ignore[misc]
        def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
            reader = engine.execute(sql, [], None, context=context)
            kept.append(reader)
            return flight.RecordBatchStream(reader)

    server = Server("grpc://127.0.0.1:0", middleware={MIDDLEWARE_KEY: HeadersMiddlewareFactory()})
    try:
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        for _ in range(3):
            try:
                client.do_get(flight.Ticket(b"t")).read_all()
            except pa.ArrowException as exc:
                assert "boom late" in str(exc)
            deadline = time.monotonic() + 10
            while engine.watchdog.running_count() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert engine.watchdog.running_count() == 0
        assert len(kept) == 3  # every reader is still referenced, yet no query holds a slot
        client.close()
        kept.clear()
        gc.collect()
        assert engine.query_table("SELECT 42 AS x", [], None).column("x").to_pylist() == [42]
    finally:
        server.shutdown()
        engine.close()
        cat.close()
