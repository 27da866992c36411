"""Connection limits of the HTTP ports, against a real server with a low descriptor limit.

Before the limits, half-sent HTTP requests (no credentials needed) were held open forever
and, past the process's open-file limit, Flight DoPuts failed with INTERNAL and new Flight
connections timed out. Here the server runs with ``RLIMIT_NOFILE`` 2048 (so the HTTP side
may hold 512 connections) and a 1 s header timeout, and 4,000 half-sent requests arrive from
other loopback addresses (127.0.0.2 and up: Linux routes all of 127/8 to the loopback
interface): REST from another address still answers, Flight appends and queries still work,
the server's descriptors stay bounded, and every half-sent connection is closed.
"""

from __future__ import annotations

import os
import resource
import selectors
import socket
import time
from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest
from adbc_driver_flightsql import dbapi as flightsql

from tests.flight_server.web.rest_support import rest_url
from tests.servers import ServerProcess

NOFILE = 2048
HEADER_TIMEOUT_S = 1.0
PER_IP = 200
TOTAL = NOFILE // 4  # what the server computes from its descriptor limit
# Descriptors beyond the caps for a moment: a batch of connections accepted (64 per loop
# turn) and not yet refused, a batch refused and being closed, and a few of Flight's.
SLACK = 3 * 64 + 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 8192:
        pytest.skip(f"this test opens ~5,000 sockets; the open-file hard limit is {hard}")
    proc = ServerProcess(tmp_path_factory.mktemp("limits") / "wh", [
        "--rest-port", "0", "--http-header-timeout", str(HEADER_TIMEOUT_S),
        "--http-max-connections-per-ip", str(PER_IP), "--http-keepalive-timeout", "1"])
    # The child inherits the lowered limit; this process needs the old one back for its sockets.
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))
    try:
        proc.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 8192) if hard == resource.RLIM_INFINITY
                                                    else min(max(soft, 8192), hard), hard))
    try:
        yield proc
    finally:
        proc.stop()


def server_fds(server: ServerProcess) -> int:
    assert server.proc is not None
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def half_sent(server: ServerProcess, sources: list[str], per_source: int) -> list[socket.socket]:
    """``per_source`` connections from each source address, each sending a request's first
    header lines and never the rest."""
    url = httpx.URL(rest_url(server))
    port = url.port
    assert port is not None
    head = f"POST /v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    socks: list[socket.socket] = []
    for source in sources:
        for _ in range(per_source):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            try:
                sock.sendall(head)
            except OSError:
                pass  # refused and closed already: fine
            socks.append(sock)
    return socks


def wait_closed_by_server(socks: list[socket.socket], timeout_s: float) -> list[socket.socket]:
    """Read every socket until the server closes it (EOF or reset); the ones still open at
    the deadline are returned (and all are closed here)."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    open_ = set(socks)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                selector.unregister(sock)
                open_.discard(sock)
    selector.close()
    for sock in socks:
        sock.close()
    return list(open_)


def test_flood_of_half_sent_requests_from_one_address(server: ServerProcess) -> None:
    base = rest_url(server)
    assert f"HTTP limits: {TOTAL} connections, {PER_IP} per client IP" in server.log, server.log
    before = server_fds(server)
    socks = half_sent(server, ["127.0.0.2"], 1000)
    try:
        # The flooder holds at most PER_IP connections; everybody else is served meanwhile.
        assert server_fds(server) <= before + PER_IP + SLACK
        answer = httpx.post(f"{base}/v1/namespaces", json={"namespace": ["while_flooded"]}, timeout=10)
        assert answer.status_code == 200, answer.text
    finally:
        still_open = wait_closed_by_server(socks, HEADER_TIMEOUT_S + 5)
    assert not still_open, f"{len(still_open)} half-sent requests were never closed by the server"
    assert "refused" in server.log  # logged ...
    assert server.log.count("HTTP connection(s) refused") <= 10  # ... once a second, not per connection


def test_flood_from_many_addresses_leaves_flight_and_rest_working(server: ServerProcess) -> None:
    base = rest_url(server)
    sources = [f"127.0.0.{n}" for n in range(3, 9)]  # 6 x 500: far past the total cap
    before = server_fds(server)
    socks = half_sent(server, sources, 500)
    try:
        assert server_fds(server) <= before + TOTAL + SLACK
        # Flight is untouched: a new connection, an append (DoPut) and a query.
        with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.adbc_ingest("flood", pa.table({"id": [1, 2, 3]}), mode="create")
            cur.execute("SELECT count(*) FROM flood")
            assert cur.fetchone() == (3,)
        # REST over the full cap: a precise 503 now (or served), never a hang ...
        try:
            answer = httpx.get(f"{base}/v1/config", timeout=10)
            assert answer.status_code in (200, 503), answer.text
            if answer.status_code == 503:
                assert answer.json()["error"]["code"] == 503
        except httpx.TransportError:
            pass  # refused before the request was written
    finally:
        still_open = wait_closed_by_server(socks, HEADER_TIMEOUT_S + 5)
    assert not still_open, f"{len(still_open)} half-sent requests were never closed by the server"
    # ... and served as soon as the header timeout has cleared the flood.
    answer = httpx.post(f"{base}/v1/namespaces", json={"namespace": ["after_flood"]}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert server.proc is not None and server.proc.poll() is None


def test_slow_headers_and_idle_keep_alive_are_closed(server: ServerProcess) -> None:
    url = httpx.URL(rest_url(server))
    assert url.port is not None
    # Headers dripping in: closed once HEADER_TIMEOUT_S has passed since the first byte.
    drip = socket.create_connection(("127.0.0.1", url.port), timeout=5)
    started = time.monotonic()
    try:
        drip.sendall(b"GET /v1/config HTTP/1.1\r\n")
        time.sleep(0.5)
        drip.sendall(f"Host: 127.0.0.1:{url.port}\r\n".encode())
        assert drip.recv(1024) == b""
        assert HEADER_TIMEOUT_S - 0.1 <= time.monotonic() - started < HEADER_TIMEOUT_S + 3
    finally:
        drip.close()
    # A keep-alive connection's next request gets the same deadline.
    conn = socket.create_connection(("127.0.0.1", url.port), timeout=5)
    try:
        conn.sendall(f"GET /v1/config HTTP/1.1\r\nHost: 127.0.0.1:{url.port}\r\n\r\n".encode())
        first = _read_response(conn)
        assert first.startswith(b"HTTP/1.1 200"), first
        conn.sendall(b"GET /v1/config HTTP/1.1\r\n")
        started = time.monotonic()
        assert _read_to_eof(conn) == b""
        assert time.monotonic() - started < HEADER_TIMEOUT_S + 3
    finally:
        conn.close()
    # An idle keep-alive connection is closed after --http-keepalive-timeout.
    with httpx.Client(timeout=5) as client:
        assert client.get(f"{url}/v1/config").status_code == 200
        time.sleep(1.5)
        assert client.get(f"{url}/v1/config").status_code == 200  # httpx reconnects


def _read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return data


def _read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_accept_errors_are_logged_at_most_once_a_second() -> None:
    import asyncio
    import logging

    from flight_server.http.limits import AcceptErrorLog

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger = logging.getLogger("icefloe.http.limits")
    logger.addHandler(handler)
    loop = asyncio.new_event_loop()
    try:
        log = AcceptErrorLog("rest")
        for _ in range(1000):
            log(loop, {"message": "socket.accept() out of system resource",
                       "exception": OSError(24, "Too many open files")})
        assert len(records) == 1 and "Too many open files" in records[0].getMessage()
        time.sleep(1.05)
        log(loop, {"message": "socket.accept() out of system resource",
                   "exception": OSError(24, "Too many open files")})
        assert len(records) == 2 and "999 more" in records[1].getMessage()
    finally:
        logger.removeHandler(handler)
        loop.close()
