"""A driver-side ``commits.v1`` subscription that streaming sources ask for their latest offset.

A background thread follows the feed (reconnecting after the last seq it saw) and keeps the
matching commits it has not been told to forget; ``wait_beyond`` blocks until a commit past a
seq arrives or a bounded wait ends, so a new commit starts a micro-batch at once, without a
polling interval, while an idle stream costs one blocked call per wait.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from flight_server.cli.client import FeedError, feed_messages
from pyspark_icefloe.connection import Settings, clean

logger = logging.getLogger("icefloe.spark")


@dataclass(frozen=True)
class Commit:
    """What a source needs of one commit event."""

    seq: int
    operation: str
    added_rows: int
    committed_at: datetime
    row: dict[str, Any]


class FeedWatcher:
    """Follows ``commits.v1`` from ``after`` for ``tables`` (None = all) in a daemon thread."""

    def __init__(self, settings: Settings, tables: Sequence[str] | None, after: int | str,
                 heartbeat_ms: int = 1000) -> None:
        self._settings = settings
        self._tables = list(tables) if tables is not None else None
        self._cursor: int | str = after
        self._heartbeat_ms = heartbeat_ms
        self._commits: list[Commit] = []
        self.head: int | None = None  # the log head when the subscription began
        self.log_start: int | None = None
        self.error: Exception | None = None
        self.covered = -1  # every matching commit with seq <= covered has been seen
        self._cond = threading.Condition()
        self._stop = threading.Event()
        client = settings.connect()  # credentials resolved once, here on the driver
        self._headers = client.auth_headers
        client.close()
        self._roots = open(settings.tls_root_certs, "rb").read() if settings.tls_root_certs else None
        self._thread = threading.Thread(target=self._run, name="icefloe-spark-feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            request: dict[str, Any] = {"feed": "commits.v1", "after": self._cursor, "heartbeat_ms": self._heartbeat_ms}
            if self._tables is not None:
                request["tables"] = self._tables
            try:
                for kind, payload in feed_messages(self._settings.uri, request, headers=self._headers,
                                                   stall_timeout_s=5 * self._heartbeat_ms / 1000 + 2,
                                                   stop=self._stop, tls_root_certs=self._roots):
                    backoff = 0.1
                    if kind == "hello":
                        self._hello(payload)
                    elif kind == "batch":
                        self._batch(payload)
                    elif kind == "heartbeat":
                        with self._cond:
                            self.covered = max(self.covered, int(payload["head"]))
                            self._cond.notify_all()
            except FeedError as exc:  # expired cursor, bad request, auth: retrying cannot help
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()
                return
            except (pa.ArrowException, OSError) as exc:
                logger.info("icefloe feed broke (%s); reconnecting after %s", clean(exc), self._cursor)
            if self._stop.wait(backoff):
                return
            backoff = min(5.0, backoff * 2)

    def _hello(self, payload: dict[str, Any]) -> None:
        with self._cond:
            if self.head is None:
                self.head = int(payload["head"])
                self.log_start = int(payload["log_start"])
            if self._cursor == "latest":
                self._cursor = int(payload["head"])
            elif self._cursor == "earliest":
                self._cursor = int(payload["log_start"]) - 1
            assert isinstance(self._cursor, int)
            self.covered = max(self.covered, self._cursor)
            self._cond.notify_all()

    def _batch(self, batch: pa.RecordBatch) -> None:
        with self._cond:
            for row in batch.to_pylist():
                seq = int(row["seq"])
                if isinstance(self._cursor, int) and seq <= self._cursor:
                    continue  # seen before a reconnect
                self._commits.append(Commit(seq, str(row["operation"]), int(row["added_rows"] or 0),
                                            row["committed_at"], row))
                self._cursor = seq
                self.covered = max(self.covered, seq)
            self._cond.notify_all()

    def ready(self, timeout_s: float) -> int:
        """The log head at subscription (waits for the hello).

        Raises:
            FeedError: The subscription was refused.
            TimeoutError: No hello in time.
        """
        with self._cond:
            self._cond.wait_for(lambda: self.head is not None or self.error is not None, timeout_s)
            self._raise()
            if self.head is None:
                raise TimeoutError(f"the icefloe feed at {self._settings.uri} did not answer in {timeout_s:.0f} s")
            return self.head

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def wait_until_covered(self, seq: int, timeout_s: float) -> None:
        """Block until every matching commit up to ``seq`` has been seen (a heartbeat or an event
        at or past it).

        Raises:
            TimeoutError: Not caught up in time.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self.error is not None or self.covered >= seq, timeout_s):
                raise TimeoutError(f"the icefloe feed did not catch up to seq {seq} in {timeout_s:.0f} s")
            self._raise()

    def commits_after(self, seq: int) -> list[Commit]:
        """The commits seen with seq > ``seq``, in order."""
        with self._cond:
            self._raise()
            return [c for c in self._commits if c.seq > seq]

    def last_seq(self) -> int | None:
        with self._cond:
            return self._commits[-1].seq if self._commits else None

    def wait_beyond(self, seq: int, timeout_s: float) -> bool:
        """Block until a commit with seq > ``seq`` is seen or ``timeout_s`` passes; True if one was."""
        with self._cond:
            found = self._cond.wait_for(
                lambda: self.error is not None or (bool(self._commits) and self._commits[-1].seq > seq), timeout_s)
            self._raise()
            return bool(found)

    def forget_through(self, seq: int) -> None:
        """Drop the commits with seq <= ``seq`` (a committed batch's end)."""
        with self._cond:
            self._commits = [c for c in self._commits if c.seq > seq]

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=10)
