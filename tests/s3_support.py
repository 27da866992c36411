"""A real S3 server (s3s-fs, built once by scripts/fetch-s3-server) for tests; no mocks.

``s3_server`` (session fixture) serves one bucket from a temporary folder on a free loopback
port; each test takes its own prefix (``s3_warehouse``). Tests that stop the store take their
own ``S3Server`` and stop / restart it on the same port.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "icefloe-test"
_binary: str | None = None
_skip_reason: str | None = None


def s3_binary() -> str:
    """The S3 server binary (built and cached on first use); skips the test without cargo."""
    global _binary, _skip_reason
    if _binary is None and _skip_reason is None:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "fetch-s3-server")], capture_output=True, text=True)
        if done.returncode == 3:
            _skip_reason = done.stderr.strip() or "no toolchain to build the S3 server"
        elif done.returncode != 0:
            raise RuntimeError("scripts/fetch-s3-server failed:\n" + done.stderr[-4000:])
        else:
            _binary = done.stdout.strip().splitlines()[-1]
    if _skip_reason is not None:
        pytest.skip(_skip_reason)
    assert _binary is not None
    return _binary


def _die_with_parent() -> None:
    """In the child: be killed when the test process dies, even by SIGKILL or a timeout (Linux),
    so an interrupted run leaves no S3 server behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Server:
    """One s3s-fs process serving ``root`` (bucket ``BUCKET`` is a folder in it)."""

    root: Path
    port: int = 0
    access_key: str = "icefloe-test-key"
    secret_key: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.secret_key = self.secret_key or secrets.token_hex(16)
        (self.root / BUCKET).mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> S3Server:
        binary = s3_binary()
        self.port = self.port or free_port()
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(self.port), "--access-key", self.access_key,
             "--secret-key", self.secret_key, str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the S3 server did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no clean shutdown, no request finished."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def env(self) -> dict[str, str]:
        """The variables an icefloe server (or a client) needs to reach this store."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "ICEFLOE_S3_ENDPOINT": self.endpoint, "ICEFLOE_S3_PATH_STYLE": "1", "AWS_REGION": "us-east-1"}

    def io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for this store."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.region": "us-east-1",
                "s3.force-virtual-addressing": "false"}

    def filesystem(self):  # type: ignore[no-untyped-def]
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint, access_key=self.access_key,
                                 secret_key=self.secret_key, region="us-east-1", force_virtual_addressing=False)

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (read from the store, as a client sees it)."""
        import pyarrow.fs as pafs

        infos = self.filesystem().get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True,
                                                                  allow_not_found=True))
        return sorted(i.path.removeprefix(f"{BUCKET}/") for i in infos if i.type == pafs.FileType.File)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_warehouse(s3_server: S3Server) -> str:
    """A fresh ``s3://`` warehouse (its own prefix in the shared bucket)."""
    return f"s3://{BUCKET}/wh-{uuid.uuid4().hex[:12]}"


def s3_server_env(server: S3Server) -> dict[str, str]:
    return {**os.environ, **server.env()}
