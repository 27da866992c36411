from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lineage_collector import Collector


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector().up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def ol_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, collector: Collector) -> Collector:
    """OPENLINEAGE_URL pointing at the collector and no other OpenLineage configuration."""
    for key in list(os.environ):
        if key.startswith("OPENLINEAGE"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
    return collector
