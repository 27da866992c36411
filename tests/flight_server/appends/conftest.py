from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from append_helpers import make_table
from servers import ServerProcess


@pytest.fixture
def table_server(warehouse: Path) -> Iterator[ServerProcess]:
    """A server over a warehouse holding an empty table ns.t (id long, v string)."""
    make_table(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log
