from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lineage_collector import Collector
from lineage_support import Opener


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector().up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No OpenLineage configuration from the machine: no env vars, no openlineage.yml."""
    for key in list(os.environ):
        if key.startswith("OPENLINEAGE"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)


@pytest.fixture
def ol_env(clean_env: None, monkeypatch: pytest.MonkeyPatch, collector: Collector) -> Collector:
    monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
    return collector


@pytest.fixture
def opener(tmp_path: Path) -> Iterator[Opener]:
    o = Opener(tmp_path / "wh")
    try:
        yield o
    finally:
        o.close_all()
