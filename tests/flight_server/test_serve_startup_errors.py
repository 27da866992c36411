"""Start-up failures of ``icefloe serve`` as an operator meets them: one clear line, exit code 1,
no traceback (a second server on a held warehouse, a port already in use, a warehouse that is
a file)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import cli_env, running
from servers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running(ServerProcess(tmp_path_factory.mktemp("held") / "warehouse")) as proc:
        yield proc


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flight_server.cli", "serve", *args], capture_output=True,
                          text=True, timeout=120, env=cli_env(), stdin=subprocess.DEVNULL)


def _one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_second_serve_on_a_held_warehouse(server: ServerProcess) -> None:
    line = _one_line_failure(_serve("--warehouse", str(server.warehouse), "--port", "0"),
                             "in use by another process", str(server.warehouse), "another --warehouse")
    assert "read-only" not in line  # advice for serve, not for in-process readers


def test_a_port_already_in_use(server: ServerProcess, tmp_path: Path) -> None:
    port = server.location.rsplit(":", 1)[1]
    _one_line_failure(_serve("--warehouse", str(tmp_path / "other"), "--port", port),
                      f"port {port} on 127.0.0.1 is already in use", "--port 0")
    # Refused before the warehouse was opened: nothing was made.
    assert not (tmp_path / "other").exists()


def test_a_warehouse_that_is_a_file(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("")
    _one_line_failure(_serve("--warehouse", str(plain), "--port", "0"), f"cannot serve {plain}")
    assert os.path.isfile(plain)
