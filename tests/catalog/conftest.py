"""Fixtures for the catalog suite: a fresh RocksCatalog, the SqlCatalog reference, and the
maintenance workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from catalog import RocksCatalog
from catalog.maintenance_worker import IN_PROCESS, MaintenanceWorker
from catalog.object_store import S3Settings


@pytest.fixture
def rocks(tmp_path: Path) -> Iterator[RocksCatalog]:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "warehouse"))
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture(params=["rocks", "rocks-file-uri", "rocks-s3", "sql"])
def catalog_kind(request: pytest.FixtureRequest) -> str:
    """RocksCatalog over a plain path, over a file:// URI and over an s3:// warehouse on the real
    S3 server (its catalog of record on local disk), and the SqlCatalog reference."""
    return str(request.param)


@pytest.fixture
def given_warehouse(catalog_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The warehouse exactly as the test hands it to the catalog."""
    if catalog_kind == "rocks-s3":
        return str(request.getfixturevalue("s3_warehouse"))
    return str(tmp_path / "warehouse") if catalog_kind == "rocks" else f"file://{tmp_path}/warehouse"


@pytest.fixture
def warehouse_uri(given_warehouse: str) -> str:
    """The warehouse as a URI (``file://`` for a local one), for locations a test names."""
    return given_warehouse if "://" in given_warehouse else f"file://{given_warehouse}"


@pytest.fixture
def any_catalog(catalog_kind: str, given_warehouse: str, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[Catalog]:
    """The behaviour under test is pyiceberg's Catalog contract; SqlCatalog is the reference."""
    cat: Catalog
    if catalog_kind == "rocks-s3":
        store = request.getfixturevalue("s3_server")
        # The settings the server would use for this store (retries, timeouts, addressing).
        settings = S3Settings(endpoint=store.endpoint, path_style=True, access_key_id=store.access_key,
                              secret_access_key=store.secret_key)
        cat = RocksCatalog("test", warehouse=given_warehouse,
                           **{"catalog-path": str(tmp_path / "catalog"), **settings.io_properties()})
    elif catalog_kind.startswith("rocks"):
        cat = RocksCatalog("test", warehouse=given_warehouse)
    else:
        cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/sql.db", warehouse=given_warehouse)
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[RocksCatalog]:
    """A RocksCatalog holding one table ``ns.t`` with a single ``id: int64`` column."""
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    yield cat
    cat.close()


@pytest.fixture(scope="module")
def process_worker() -> Iterator[MaintenanceWorker]:
    worker = MaintenanceWorker()
    yield worker
    worker.close()


@pytest.fixture(params=["in-process", "worker-process"])
def worker(request: pytest.FixtureRequest) -> MaintenanceWorker:
    """Each kind of maintenance worker: inline, and a worker process (as the server runs it)."""
    if request.param == "in-process":
        return IN_PROCESS
    return request.getfixturevalue("process_worker")  # type: ignore[no-any-return]
