"""Fixtures for the SQL write tests: a real server over a fresh warehouse, ADBC connections,
and a read-only RocksCatalog opened in the test process while the server holds the warehouse."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import pytest
from servers import ServerProcess


@pytest.fixture(scope="module")
def write_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("sqlwrites") / "warehouse"
    proc = ServerProcess(warehouse, env={"PYTHONFAULTHANDLER": "1"}).start()
    try:
        yield proc
    finally:
        crashed = proc.proc is not None and proc.proc.poll() is not None
        proc.stop()
        if crashed:  # keep the evidence: the server must never die on a bad request
            (warehouse.parent / "server.log").write_text(proc.log)
            pytest.fail("the server died during the tests; its log is in " + str(warehouse.parent / "server.log"))


@pytest.fixture
def conn(write_server: ServerProcess) -> Iterator[Any]:
    connection = fsql.connect(write_server.location, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def reader_catalog(write_server: ServerProcess) -> Iterator[Any]:
    """pyiceberg's view of the warehouse: a read-only RocksCatalog in this process."""
    from catalog import RocksCatalog

    cat = RocksCatalog("reader", warehouse=str(write_server.warehouse), **{"read-only": "true"})
    try:
        yield cat
    finally:
        cat.close()
