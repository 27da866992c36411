"""A fault-injecting HTTP relay in front of the real S3 server (s3s-fs), for the fault tests.

Every request is passed to the real store byte for byte (headers, ``Host`` included, so the
client's SigV4 signature still verifies) unless a rule picks it: then the relay answers an S3
error status itself (``fail``), or waits before passing it on (``delay``; ``release_held`` ends
the waits early, so a test need not sleep out a stall its client already gave up on). It also records each
request (method, key, status, when its answer went back), so a test can tell which objects were
PUT and whether that happened before a commit was acknowledged. The store itself is never
imitated: with no rule active the relay is transparent.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_ERROR_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
               b"<Message>injected by the test relay</Message></Error>")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass
class Rule:
    """Requests whose method is ``method`` and whose ``path?query`` matches ``pattern``."""

    method: str
    pattern: re.Pattern[str]
    status: int = 0  # answer this status instead of passing the request on (0: pass it on)
    delay_s: float = 0.0  # wait this long first
    remaining: int = -1  # how many more requests it applies to (-1: all)
    hits: int = 0
    released: threading.Event = field(default_factory=threading.Event)  # set: held requests go on now


@dataclass(frozen=True)
class Request:
    method: str
    key: str  # bucket/key, unquoted
    query: str
    status: int  # as answered to the client (599: the store could not be reached)
    answered_at: float  # time.monotonic() when the answer was sent


@dataclass
class FaultRelay:
    """Listens on a free loopback port and relays to ``upstream_port`` on 127.0.0.1."""

    upstream_port: int
    rules: list[Rule] = field(default_factory=list)
    log: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    # Requests a delay rule holds, counted until their answer is sent (or the relay gives up).
    _holding: int = 0
    _delay_rules: list[Rule] = field(default_factory=list)
    _idle: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._idle = threading.Condition(self._lock)

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultRelay:
        relay = self

        class Handler(_RelayHandler):
            owner = relay

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def fail(self, method: str, pattern: str, status: int = 500, times: int = -1) -> Rule:
        return self._add(Rule(method, re.compile(pattern), status=status, remaining=times))

    def delay(self, method: str, pattern: str, seconds: float, times: int = -1) -> Rule:
        rule = self._add(Rule(method, re.compile(pattern), delay_s=seconds, remaining=times))
        with self._lock:
            self._delay_rules.append(rule)
        return rule

    def release_held(self, timeout: float = 120.0) -> None:
        """End the wait of every request a delay rule holds (the store answers late, now rather
        than after the whole delay) and return once each has been passed on and answered."""
        with self._idle:
            for rule in self._delay_rules:
                rule.released.set()
            if not self._idle.wait_for(lambda: self._holding == 0, timeout):
                raise TimeoutError(f"{self._holding} held requests still in flight after {timeout} s")

    def hold(self, rule: Rule) -> None:
        with self._lock:
            self._holding += 1

    def let_go(self) -> None:
        with self._idle:
            self._holding -= 1
            self._idle.notify_all()

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def pick(self, method: str, target: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.remaining != 0 and rule.method == method and rule.pattern.search(target):
                    rule.remaining -= 1 if rule.remaining > 0 else 0
                    rule.hits += 1
                    return rule
        return None

    def record(self, method: str, target: str, status: int) -> None:
        parts = urlsplit(target)
        with self._lock:
            self.log.append(Request(method, unquote(parts.path).lstrip("/"), parts.query, status, time.monotonic()))

    def requests(self, method: str | None = None) -> Iterator[Request]:
        with self._lock:
            logged = list(self.log)
        return (r for r in logged if method is None or r.method == method)

    def stored(self) -> dict[str, float]:
        """Each key whose object was written successfully (a PUT without ``partNumber``, or a
        completed multipart upload) -> when that answer went back (the last time)."""
        done: dict[str, float] = {}
        for r in self.requests():
            whole_put = r.method == "PUT" and "partNumber=" not in r.query
            completed = r.method == "POST" and "uploadId=" in r.query
            if (whole_put or completed) and 200 <= r.status < 300:
                done[r.key] = r.answered_at
        return done


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that drops its connection (a timed-out upload) is expected here


class _RelayHandler(BaseHTTPRequestHandler):
    owner: FaultRelay
    protocol_version = "HTTP/1.1"
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # the base's name
        pass  # the test reads the request log, not stderr

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        body = self._body()
        rule = self.owner.pick(self.command, self.path)
        if rule is None or not rule.delay_s:
            self._pass_on(rule, body)
            return
        self.owner.hold(rule)
        try:
            rule.released.wait(rule.delay_s)
            self._pass_on(rule, body)
        finally:
            self.owner.let_go()

    def _pass_on(self, rule: Rule | None, body: bytes) -> None:
        if rule is not None and rule.status:
            self._answer(rule.status, [("Content-Type", "application/xml")], _ERROR_BODY)
            return
        try:
            status, headers, answer = self._forward(body)
        except OSError:
            # The store is down: the client sees its connection dropped, as it would.
            self._upstream = None
            self.owner.record(self.command, self.path, 599)
            self.close_connection = True
            return
        self._answer(status, headers, answer)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        if self._upstream is None:
            self._upstream = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=120)
        conn = self._upstream
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    conn.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._upstream = None
            raise OSError(str(exc)) from exc
        headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        if self.command != "HEAD":
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(answer))))
        return response.status, headers, answer

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(k.lower() == "content-length" for k, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()
        self.owner.record(self.command, self.path, status)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay
