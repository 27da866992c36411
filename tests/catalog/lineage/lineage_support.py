"""Helpers shared by the catalog lineage tests (imported by name, unlike conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog import RocksCatalog
from catalog.lineage import LineageExporter, LineageSettings

SETTINGS = LineageSettings(namespace="icefloe-test", catalog_uri="grpc://127.0.0.1:1", warehouse="/tmp/wh")


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
