from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import ServerProcess  # noqa: E402

# The warehouse of a test: a local folder, or (for modules that ask: ON_EVERY_STORAGE) an S3 prefix.
from storage_kinds import Warehouse, start_server, storage_kind, warehouse  # noqa: E402, F401


@pytest.fixture
def server(warehouse: Warehouse) -> Iterator[ServerProcess]:  # noqa: F811  # the fixture imported above
    """A real icefloe server on a free port over a fresh warehouse."""
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


# The real S3 server's fixtures (s3_server, s3_warehouse), for every test folder.
from s3_support import s3_server, s3_warehouse  # noqa: E402, F401
