from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import ServerProcess  # noqa: E402


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def server(warehouse: Path) -> Iterator[ServerProcess]:
    """A real icefloe server on a free port over a fresh warehouse."""
    proc = ServerProcess(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


# The real S3 server's fixtures (s3_server, s3_warehouse), for every test folder.
from s3_support import s3_server, s3_warehouse  # noqa: E402, F401
