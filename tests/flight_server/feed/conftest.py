from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storage_kinds import S3Warehouse, Warehouse  # noqa: E402

from catalog import RocksCatalog  # noqa: E402
from flight_server.config import Config  # noqa: E402
from flight_server.server import IcefloeServer  # noqa: E402


@pytest.fixture
def feed_server(warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[IcefloeServer]:
    """An in-process icefloe server on a free port; commits go through ``server.catalog``."""
    if isinstance(warehouse, S3Warehouse):
        for name, value in warehouse.store.env().items():  # the keys, as the server reads them
            monkeypatch.setenv(name, value)
        config = Config(warehouse=warehouse.uri, catalog_path=str(warehouse.catalog_path),
                        s3_endpoint=warehouse.store.endpoint, s3_path_style=True, port=0)
    else:
        config = Config(warehouse=str(warehouse), port=0)
    server = IcefloeServer(config)
    try:
        yield server
    finally:
        server.shutdown_and_close(grace_s=10.0)


@pytest.fixture
def location(feed_server: IcefloeServer) -> str:
    return f"grpc://127.0.0.1:{feed_server.port}"


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[RocksCatalog]:
    cat = RocksCatalog("fanout", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    try:
        yield cat
    finally:
        cat.close()
