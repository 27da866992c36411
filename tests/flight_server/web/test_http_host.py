"""The HTTP side's host: off by default, ports from the flags (0 = free), logged, stopped
with the server, and a bad port fails the start with a message, not a traceback."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.servers import serving

REST_LINE = re.compile(r"icefloe REST catalog on (http://\S+)")
METRICS_LINE = re.compile(r"icefloe metrics on (http://\S+)/metrics")


def test_http_side_is_off_by_default(tmp_path: Path) -> None:
    with serving(tmp_path / "wh") as server:
        assert not REST_LINE.search(server.log)
        assert not METRICS_LINE.search(server.log)


def test_rest_and_metrics_ports_are_logged_and_served(tmp_path: Path) -> None:
    with serving(tmp_path / "wh", ["--rest-port", "0", "--metrics-port", "0"]) as server:
        rest = REST_LINE.search(server.log)
        metrics = METRICS_LINE.search(server.log)
        assert rest and metrics, server.log
        assert rest.group(1) != metrics.group(1)
        for base in (rest.group(1), metrics.group(1)):
            # Nothing is mounted at this path on either app: a 404, served by the HTTP stack.
            assert httpx.get(f"{base}/no/such/path", timeout=10).status_code == 404
    for base in (rest.group(1), metrics.group(1)):
        try:
            httpx.get(f"{base}/no/such/path", timeout=2)
        except httpx.TransportError:
            continue
        raise AssertionError(f"{base} still answers after the server stopped")


def test_a_taken_port_fails_the_start_cleanly(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "flight_server.cli", "serve", "--warehouse", str(tmp_path / "wh"),
             "--port", "0", "--rest-port", str(port)],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        taken.close()
    assert proc.returncode != 0
    assert "cannot serve HTTP" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_out_of_range_port_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flight_server.cli", "serve", "--warehouse", str(tmp_path / "wh"),
         "--rest-port", "70000"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "--rest-port" in proc.stderr
