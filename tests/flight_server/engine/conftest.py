"""Fixtures of the engine's in-process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog import RocksCatalog
from flight_server.engine import Engine


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[RocksCatalog, Engine]]:
    """A real catalog with namespace ``ns`` and an engine of two slots over it."""
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    catalog.create_namespace("ns")
    engine = Engine(catalog, max_concurrent=2)
    try:
        yield catalog, engine
    finally:
        engine.close()
        catalog.close()
