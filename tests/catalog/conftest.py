"""Fixtures for the catalog suite: a fresh RocksCatalog, and the SqlCatalog reference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from catalog import RocksCatalog


@pytest.fixture
def rocks(tmp_path: Path) -> Iterator[RocksCatalog]:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "warehouse"))
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture(params=["rocks", "rocks-file-uri", "sql"])
def catalog_kind(request: pytest.FixtureRequest) -> str:
    """RocksCatalog over a plain path, RocksCatalog over a file:// URI, and the SqlCatalog reference."""
    return str(request.param)


@pytest.fixture
def given_warehouse(catalog_kind: str, tmp_path: Path) -> str:
    """The warehouse exactly as the test hands it to the catalog."""
    return str(tmp_path / "warehouse") if catalog_kind == "rocks" else f"file://{tmp_path}/warehouse"


@pytest.fixture
def any_catalog(catalog_kind: str, given_warehouse: str, tmp_path: Path) -> Iterator[Catalog]:
    """The behaviour under test is pyiceberg's Catalog contract; SqlCatalog is the reference."""
    cat: Catalog
    if catalog_kind.startswith("rocks"):
        cat = RocksCatalog("test", warehouse=given_warehouse)
    else:
        cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/sql.db", warehouse=given_warehouse)
    try:
        yield cat
    finally:
        cat.close()
