from __future__ import annotations

from collections.abc import Iterator

import pytest
from append_helpers import make_table
from servers import ServerProcess
from storage_kinds import Warehouse, start_server


@pytest.fixture
def table_server(warehouse: Warehouse) -> Iterator[ServerProcess]:
    """A server over a warehouse holding an empty table ns.t (id long, v string)."""
    make_table(warehouse)
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log
