"""A real PostgreSQL server (scripts/postgres-server: a scratch cluster, wal_level=logical) for
the CDC connector's tests; no mocks.

``postgres`` (session fixture) is one cluster per test run; tests keep apart by table,
publication and slot names (``PostgresServer.names``). The cluster can be stopped and started
again on the same port (a source that goes down and comes back).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_names = itertools.count(1)


def _die_with_parent() -> None:
    """In the child: be stopped when the test process dies (even by SIGKILL), so an
    interrupted run leaves no cluster behind (the script stops postgres on SIGTERM)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except OSError:
        pass


class PostgresServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port: int | None = None
        self.dsn = ""
        self.proc: subprocess.Popen[str] | None = None
        self.data: Path | None = None

    def start(self) -> PostgresServer:
        env = dict(os.environ)
        if self.port is not None:
            env["ICEFLOE_PG_PORT"] = str(self.port)
        self.proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "postgres-server"), str(self.root)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=_die_with_parent)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("POSTGRES_DSN="):
            code = self.proc.wait(60)
            error = self.proc.stderr.read() if self.proc.stderr else ""
            if code == 3:
                pytest.skip(f"no PostgreSQL server: {error.strip()}")
            raise RuntimeError(f"scripts/postgres-server failed ({code}): {error[-4000:]}")
        fields = dict(part.split("=", 1) for part in line.split())
        self.dsn = fields["POSTGRES_DSN"]
        self.data = Path(fields["POSTGRES_DATA"])
        self.port = int(self.dsn.rsplit(":", 1)[1].split("/")[0])
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
            self.proc = None

    def connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            pytest.skip("psycopg is not installed (pip install 'icefloe[postgres]')")
        return psycopg.connect(self.dsn, autocommit=True)

    def execute(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cur = conn.execute(statement, params)
                rows = cur.fetchall() if cur.description else []
            return rows

    def drop_slot(self, slot: str) -> None:
        """Drop replication slot ``slot`` (if it exists), ending the walsender streaming from it
        first: a connector's stream holds its slot until the server notices it is gone."""
        deadline = time.monotonic() + 30
        while True:
            self.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s "
                         "AND active_pid IS NOT NULL", params=(slot,))
            try:
                self.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE slot_name = %s", params=(slot,))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the walsender was still exiting, or a connector streamed again

    @staticmethod
    def names() -> tuple[str, str, str]:
        """A fresh (table, publication, slot) name triple."""
        n = next(_names)
        return f"t{os.getpid()}_{n}", f"p{os.getpid()}_{n}", f"s{os.getpid()}_{n}"


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'icefloe[postgres]')")
    server = PostgresServer(tmp_path_factory.mktemp("postgres")).start()
    try:
        yield server
    finally:
        server.stop()
        if server.data is not None and not server.data.is_relative_to(server.root):
            shutil.rmtree(server.data.parent, ignore_errors=True)  # the cluster's own folder (see the script)
