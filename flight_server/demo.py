"""``icefloe serve --demo``: a small sample dataset, written through the catalog like any commit."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

logger = logging.getLogger("icefloe.demo")

NAMESPACE = "demo"

_CITIES: dict[str, list[Any]] = {
    "city_id": [1, 2, 3, 4, 5, 6, 7, 8],
    "name": ["Reykjavik", "Oslo", "Helsinki", "Tromso", "Nuuk", "Murmansk", "Anchorage", "Longyearbyen"],
    "country": ["IS", "NO", "FI", "NO", "GL", "RU", "US", "NO"],
    "population": [139_875, 709_037, 664_028, 77_544, 19_872, 267_422, 291_247, 2_417],
    "latitude": [64.15, 59.91, 60.17, 69.65, 64.18, 68.97, 61.22, 78.22],
}


def _floes() -> dict[str, list[Any]]:
    """Deterministic daily sea-ice floe sightings per city (no randomness: same data every time)."""
    rows: dict[str, list[Any]] = {"city_id": [], "day": [], "floes": [], "max_area_km2": []}
    import datetime as dt

    start = dt.date(2026, 1, 1)
    for day in range(60):
        for city_id in _CITIES["city_id"]:
            seed = (city_id * 7919 + day * 104729) % 1000
            rows["city_id"].append(city_id)
            rows["day"].append(start + dt.timedelta(days=day))
            rows["floes"].append(seed % 37)
            rows["max_area_km2"].append(round((seed % 113) * 0.37, 2))
    return rows


def load_demo(catalog: Any) -> None:
    """Create ``demo.cities`` and ``demo.floe_sightings`` unless they already exist."""
    if not catalog.namespace_exists(NAMESPACE):
        catalog.create_namespace(NAMESPACE)
    tables = {
        "cities": pa.table(
            _CITIES,
            schema=pa.schema(
                [
                    pa.field("city_id", pa.int32(), nullable=False),
                    pa.field("name", pa.string()),
                    pa.field("country", pa.string()),
                    pa.field("population", pa.int64()),
                    pa.field("latitude", pa.float64()),
                ]
            ),
        ),
        "floe_sightings": pa.table(
            _floes(),
            schema=pa.schema(
                [
                    pa.field("city_id", pa.int32(), nullable=False),
                    pa.field("day", pa.date32()),
                    pa.field("floes", pa.int32()),
                    pa.field("max_area_km2", pa.float64()),
                ]
            ),
        ),
    }
    for name, data in tables.items():
        if catalog.table_exists((NAMESPACE, name)):
            continue
        table = catalog.create_table((NAMESPACE, name), data.schema)
        table.append(data)
        logger.info("demo table %s.%s loaded (%d rows)", NAMESPACE, name, data.num_rows)
