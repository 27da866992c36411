"""Fixtures for the SQL write tests: a real server over a fresh warehouse, ADBC connections,
and a read-only RocksCatalog opened in the test process while the server holds the warehouse.

The warehouse is a local folder unless a test asks for both storages with ``sqlwrites_lib.ON_BOTH_STORAGES``
(then its module's server runs once per storage: a local folder, and a prefix of the S3 server).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import pytest
from servers import ServerProcess
from storage_kinds import S3Warehouse, Warehouse, open_catalog, start_server


@pytest.fixture(scope="module")
def write_storage(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="module")
def write_warehouse(write_storage: str, tmp_path_factory: pytest.TempPathFactory,
                    request: pytest.FixtureRequest) -> Warehouse:
    folder = tmp_path_factory.mktemp("sqlwrites")
    if write_storage == "s3":
        return S3Warehouse.fresh(request.getfixturevalue("s3_server"), folder)
    return folder / "warehouse"


@pytest.fixture(scope="module")
def write_server(write_warehouse: Warehouse) -> Iterator[ServerProcess]:
    proc = start_server(write_warehouse, env={"PYTHONFAULTHANDLER": "1"}).start()
    warehouse = proc.warehouse
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
def reader_catalog(write_server: ServerProcess, write_warehouse: Warehouse) -> Iterator[Any]:
    """pyiceberg's view of the warehouse: a read-only RocksCatalog in this process."""
    cat = open_catalog(write_warehouse, "reader", read_only=True)
    try:
        yield cat
    finally:
        cat.close()
