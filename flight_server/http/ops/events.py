"""Server-sent events of the commit feed for watch pages, from the catalog's commit hub.

The hub calls ``on_commit`` on the committing thread, under the catalog's commit lock, so it
only schedules the record onto the HTTP event loop (``call_soon_threadsafe``: a deque append
and a non-blocking wake-up write) and returns. On the loop each browser has a bounded queue;
a browser that reads too slowly overflows it and is sent ``resync`` (reload the tables)
instead of the events it missed: a slow page can never hold up a writer or another page.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator

from catalog.commit_log import CommitRecord
from catalog.subscriptions import CommitHub
from flight_server.operations import event_json, for_browser

logger = logging.getLogger("icefloe.http.events")

QUEUE_SIZE = 256
MAX_CLIENTS = 100
KEEPALIVE_S = 15.0
# How often a waiting stream looks at the server's stopping flag.
STOP_CHECK_S = 0.5


class TooManyWatchers(Exception):
    """More event streams are open than ``MAX_CLIENTS``."""


class _Client:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False


class CommitBroadcaster:
    """Commit events for the event streams of one HTTP app (one asyncio loop).

    Args:
        hub: The catalog's commit hub (the one the Flight feed uses).
        stopping: Set when the server shuts down; open streams then end.
        max_clients: Most event streams open at once.
    """

    def __init__(self, hub: CommitHub, stopping: threading.Event, max_clients: int = MAX_CLIENTS) -> None:
        self.stopping = stopping
        self.max_clients = max_clients
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: set[_Client] = set()
        hub.add_listener(self.on_commit)

    def on_commit(self, record: CommitRecord) -> None:
        """Hub listener (committing thread, commit lock held): schedule, never wait."""
        loop = self._loop
        if loop is None or not self._clients:
            return
        try:
            loop.call_soon_threadsafe(self._fan_out, record)
        except RuntimeError:  # the loop has closed (the HTTP side is stopping)
            self._loop = None

    def _fan_out(self, record: CommitRecord) -> None:
        data = json.dumps(for_browser(event_json(record)), separators=(",", ":"))
        message = f"id: {record.seq}\nevent: commit\ndata: {data}\n\n"
        for client in self._clients:
            if client.overflowed:
                continue
            try:
                client.queue.put_nowait(message)
            except asyncio.QueueFull:
                client.overflowed = True

    def open(self) -> _Client:
        """Register a new event stream (on the loop).

        Raises:
            TooManyWatchers: ``max_clients`` streams are open.
        """
        if len(self._clients) >= self.max_clients:
            raise TooManyWatchers(f"at most {self.max_clients} event streams at once")
        self._loop = asyncio.get_running_loop()
        client = _Client()
        self._clients.add(client)
        return client

    def close(self, client: _Client) -> None:
        self._clients.discard(client)

    async def stream(self, client: _Client, head: int) -> AsyncIterator[str]:
        """The text of one event stream: ``hello``, then ``commit`` events as they land."""
        try:
            yield f"retry: 1000\nevent: hello\ndata: {json.dumps({'head': head})}\n\n"
            idle = 0.0
            while not self.stopping.is_set():
                if client.overflowed:
                    while not client.queue.empty():
                        client.queue.get_nowait()
                    client.overflowed = False
                    yield "event: resync\ndata: {}\n\n"
                    continue
                try:
                    message = await asyncio.wait_for(client.queue.get(), STOP_CHECK_S)
                except TimeoutError:
                    idle += STOP_CHECK_S
                    if idle >= KEEPALIVE_S:
                        idle = 0.0
                        yield ": keep-alive\n\n"
                    continue
                idle = 0.0
                yield message
        finally:
            self.close(client)
