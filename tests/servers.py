"""Start real icefloe servers as child processes for integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# The location ends at whitespace, or at the quote closing the message of a --log-format json line.
READY = re.compile(r"icefloe listening on ([^\s\"]+)")
ROOT = Path(__file__).resolve().parent.parent


class ServerProcess:
    """A real ``icefloe serve`` child process on a free port."""

    def __init__(self, warehouse: Path, extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.warehouse = Path(warehouse)
        self.cwd = cwd
        self.extra_args = list(extra_args)
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = str(ROOT) + os.pathsep + self.env.get("PYTHONPATH", "")
        self.proc: subprocess.Popen[str] | None = None
        self.location = ""
        self.log_lines: list[str] = []

    def start(self, timeout: float = 60.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "flight_server.cli", "serve", "--warehouse", str(self.warehouse),
               "--port", "0", *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env,
                                     cwd=self.cwd)
        found = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log_lines.append(line)
                m = READY.search(line)
                if m and not found.is_set():
                    self.location = m.group(1)
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("icefloe server did not start:\n" + "".join(self.log_lines))
        return self

    @property
    def log(self) -> str:
        return "".join(self.log_lines)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: no clean-up at all, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()


@contextmanager
def serving(warehouse: Path, extra_args: Sequence[str] = (), **kwargs: object) -> Iterator[ServerProcess]:
    """A started server for the ``with`` block, stopped after it."""
    proc = ServerProcess(warehouse, extra_args, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield proc
    finally:
        proc.stop()
