"""Server-sent events of the commit feed for watch pages, from the catalog's commit hub.

The hub calls ``on_commit`` on the committing thread, under the catalog's commit lock, so it
only schedules the record onto the HTTP event loop (``call_soon_threadsafe``: a deque append
and a non-blocking wake-up write) and returns. On the loop each browser has a bounded queue;
a browser that reads too slowly overflows it and is sent ``resync`` (reload the tables)
instead of the events it missed: a slow page can never hold up a writer or another page.

Streams are capped in total (``max_clients``, answered 503 beyond) and per user
(``max_per_user``, answered 429 beyond): before the per-user cap, one user's 100 streams made
every other user's, the admin's included, fail. The user is the login name with ``--users``,
else the client IP. An admin is also not held back by the total cap (up to ``max_per_user``
streams beyond it), so an operator can always watch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator

from catalog.commit_log import CommitRecord
from catalog.subscriptions import CommitHub
from flight_server.http.ops.history import commit_view
from flight_server.observability.operations import for_browser

logger = logging.getLogger("icefloe.http.events")

QUEUE_SIZE = 256
MAX_CLIENTS = 100
MAX_PER_USER = 16
KEEPALIVE_S = 15.0
# How often a waiting stream looks at the server's stopping flag.
STOP_CHECK_S = 0.5


class TooManyWatchers(Exception):
    """As many event streams are open as the server allows in total (503)."""


class TooManyWatchersForUser(TooManyWatchers):
    """As many event streams are open as one user may hold (429)."""


class _Client:
    def __init__(self, user: str) -> None:
        self.user = user
        self.queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False


class CommitBroadcaster:
    """Commit events for the event streams of one HTTP app (one asyncio loop).

    Args:
        hub: The catalog's commit hub (the one the Flight feed uses).
        stopping: Set when the server shuts down; open streams then end.
        max_clients: Most event streams open at once.
        max_per_user: Most event streams one user (or client IP) holds at once.
    """

    def __init__(self, hub: CommitHub, stopping: threading.Event, max_clients: int = MAX_CLIENTS,
                 max_per_user: int = MAX_PER_USER) -> None:
        self.stopping = stopping
        self.max_clients = max_clients
        self.max_per_user = max_per_user
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: set[_Client] = set()
        self._per_user: dict[str, int] = {}
        hub.add_listener(self.on_commit)

    @property
    def open_count(self) -> int:
        """Event streams open now (read from any thread: a size, never the set itself)."""
        return len(self._clients)

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
        # The same fields as the history (/api/commits): a live row and a paged one look alike.
        data = json.dumps(for_browser(commit_view(record)), separators=(",", ":"))
        message = f"id: {record.seq}\nevent: commit\ndata: {data}\n\n"
        for client in self._clients:
            if client.overflowed:
                continue
            try:
                client.queue.put_nowait(message)
            except asyncio.QueueFull:
                client.overflowed = True

    def open(self, user: str = "", admin: bool = False) -> _Client:
        """Register a new event stream of ``user`` (on the loop; no lock needed).

        Raises:
            TooManyWatchersForUser: ``user`` holds ``max_per_user`` streams.
            TooManyWatchers: ``max_clients`` streams are open (an admin may go beyond by
                ``max_per_user``).
        """
        held = self._per_user.get(user, 0)
        if held >= self.max_per_user:
            raise TooManyWatchersForUser(f"at most {self.max_per_user} event streams per user at once; "
                                         "close another watch page first")
        if len(self._clients) >= self.max_clients + (self.max_per_user if admin else 0):
            raise TooManyWatchers(f"at most {self.max_clients} event streams at once; retry later")
        self._loop = asyncio.get_running_loop()
        client = _Client(user)
        self._clients.add(client)
        self._per_user[user] = held + 1
        return client

    def close(self, client: _Client) -> None:
        if client not in self._clients:
            return
        self._clients.discard(client)
        left = self._per_user.get(client.user, 0) - 1
        if left > 0:
            self._per_user[client.user] = left
        else:
            self._per_user.pop(client.user, None)

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
