"""Fixtures for the Flight SQL tests: a warehouse with tables written through the catalog first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flightsql_samples import make_sample_warehouse
from servers import ServerProcess


@pytest.fixture(scope="module")
def sample_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server per test module over the sample warehouse (tests must not write to it)."""
    warehouse = tmp_path_factory.mktemp("flightsql") / "warehouse"
    make_sample_warehouse(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def uri(sample_server: ServerProcess) -> str:
    return sample_server.location
