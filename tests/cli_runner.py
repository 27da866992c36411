"""Run the real ``icefloe`` command line in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from servers import ROOT, ServerProcess

# Environment variables of the client commands: a test sets what it means, nothing leaks in.
CLIENT_ENV = ("ICEFLOE_URI", "ICEFLOE_SERVER", "ICEFLOE_LOCATION", "ICEFLOE_TOKEN", "ICEFLOE_USER",
              "ICEFLOE_TLS_ROOT_CERTS", "ICEFLOE_HISTORY", "ICEFLOE_WAREHOUSE")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_ENV}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def icefloe(*args: str, input: str | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``icefloe ARGS...`` with ``input`` on stdin (not a terminal); never raises on failure."""
    return subprocess.run(
        [sys.executable, "-m", "flight_server.cli", *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
    )


def clean_failure(result: subprocess.CompletedProcess[str], needle: str) -> None:
    """The command failed with a message naming ``needle`` and no traceback."""
    assert result.returncode != 0, result.stdout
    assert needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout


@contextmanager
def running(proc: ServerProcess) -> Iterator[ServerProcess]:
    """Start the server, hand it out, stop it; it must not have logged a traceback."""
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log
