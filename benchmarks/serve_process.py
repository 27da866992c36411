"""``icefloe serve`` as a child process on a free port, for benchmarks that need a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY = re.compile(r"icefloe listening on (\S+)")
REST = re.compile(r"icefloe REST catalog on (\S+)")


class ServeProcess:
    """Starts the server over ``warehouse``; ``location`` is where it listens."""

    def __init__(self, warehouse: Path, start_timeout_s: float = 60.0, extra_args: Sequence[str] = (),
                 root: Path = ROOT) -> None:
        # ``root``: the checkout whose code serves (another one: a baseline measured side by side).
        env = {**os.environ, "PYTHONPATH": str(root), "ICEFLOE_LOG_LEVEL": "info"}
        cmd = [sys.executable, "-m", "flight_server.cli", "serve", "--warehouse", str(warehouse), "--port", "0",
               *extra_args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
                                     cwd=None if root == ROOT else root)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + start_timeout_s
        self.location = ""
        self.rest_url = ""  # with --rest-port: the REST catalog's base URL
        for line in self.proc.stderr:
            if rest := REST.search(line):
                self.rest_url = rest.group(1)
            if found := READY.search(line):
                self.location = found.group(1)
                break
            if time.monotonic() > deadline:
                break
        if not self.location:
            self.proc.kill()
            raise RuntimeError("the server did not start")
        # Keep draining its log so the server never blocks on a full pipe; keep its tail for
        # a benchmark that fails (the server's side of the failure is in it).
        self.log_tail: deque[str] = deque(maxlen=400)
        threading.Thread(target=lambda: self.log_tail.extend(self.proc.stderr or ()), daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
