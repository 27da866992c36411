"""The server process keeps freed memory for reuse (mimalloc's purge delay), unless the operator
chose otherwise: checked in mimalloc's own report of its options (``MIMALLOC_VERBOSE``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from servers import ServerProcess

# Not imported from flight_server.allocator: importing it sets the variable in this process,
# which every server started from here would inherit.
PURGE_DELAY_MS = "10000"
OPTION = re.compile(r"option 'purge_delay': (-?\d+)")


def _purge_delay(tmp_path: Path, env: dict[str, str]) -> str:
    server = ServerProcess(tmp_path / "warehouse", env={"MIMALLOC_VERBOSE": "1", **env})
    if "MIMALLOC_PURGE_DELAY" not in env:
        server.env.pop("MIMALLOC_PURGE_DELAY", None)
    server.start()
    try:
        found = OPTION.search(server.log)
    finally:
        server.stop()
    if found is None:
        pytest.skip("this pyarrow's allocator does not report mimalloc options")
    return found.group(1)


def test_the_server_keeps_freed_memory_for_reuse(tmp_path: Path) -> None:
    # mimalloc's own default is 10 ms: a long scan would fault fresh pages in all the time.
    assert _purge_delay(tmp_path, {}) == PURGE_DELAY_MS


def test_an_operators_allocator_setting_wins(tmp_path: Path) -> None:
    assert _purge_delay(tmp_path, {"MIMALLOC_PURGE_DELAY": "250"}) == "250"
