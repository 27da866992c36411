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


@pytest.fixture(params=["rocks", "sql"])
def any_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """The behaviour under test is pyiceberg's Catalog contract; SqlCatalog is the reference."""
    cat: Catalog
    if request.param == "rocks":
        cat = RocksCatalog("test", warehouse=str(tmp_path / "warehouse"))
    else:
        cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/sql.db", warehouse=f"file://{tmp_path}/warehouse")
    try:
        yield cat
    finally:
        cat.close()
