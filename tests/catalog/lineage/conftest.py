from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lineage_collector import Collector

from catalog import RocksCatalog
from catalog.lineage import LineageExporter, LineageSettings

SETTINGS = LineageSettings(namespace="icefloe-test", catalog_uri="grpc://127.0.0.1:1", warehouse="/tmp/wh")


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


class Opener:
    """Open catalog + started exporter over one warehouse; whatever is left open is closed."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.opened: list[tuple[RocksCatalog, LineageExporter]] = []

    def open(self, settings: LineageSettings = SETTINGS, **kwargs: Any) -> tuple[RocksCatalog, LineageExporter]:
        cat = RocksCatalog("test", warehouse=str(self.warehouse))
        exporter = LineageExporter(cat, **kwargs).start(settings)
        self.opened.append((cat, exporter))
        return cat, exporter

    def close(self, cat: RocksCatalog, exporter: LineageExporter) -> None:
        self.opened.remove((cat, exporter))
        exporter.stop()
        cat.close()

    def close_all(self) -> None:
        for pair in list(self.opened):
            self.close(*pair)


@pytest.fixture
def opener(tmp_path: Path) -> Iterator[Opener]:
    o = Opener(tmp_path / "wh")
    try:
        yield o
    finally:
        o.close_all()
