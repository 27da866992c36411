"""Helpers for the append integration tests (real server, pyarrow.flight DoPut)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from catalog import RocksCatalog

IDEMPOTENCY_HEADER = b"x-icefloe-idempotency-key"


def make_table(
    warehouse: Path, name: str = "ns.t", schema: pa.Schema | None = None, properties: dict[str, str] | None = None
) -> None:
    """Create a table offline (before the server starts)."""
    cat = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        ns = tuple(name.split(".")[:-1])
        if not cat.namespace_exists(ns):
            cat.create_namespace(ns)
        cat.create_table(
            name, schema or pa.schema([("id", pa.int64()), ("v", pa.string())]), properties=properties or {}
        )
    finally:
        cat.close()


def do_put(
    location: str, path: tuple[str, ...], data: pa.Table, key: str | None = None, batch_rows: int | None = None
) -> dict[str, Any]:
    client = flight.FlightClient(location)
    try:
        headers = [(IDEMPOTENCY_HEADER, key.encode())] if key is not None else []
        writer, reader = client.do_put(
            flight.FlightDescriptor.for_path(*path), data.schema, options=flight.FlightCallOptions(headers=headers)
        )
        writer.write_table(data, max_chunksize=batch_rows)
        writer.done_writing()
        buf = reader.read()
        writer.close()
        assert buf is not None
        result: dict[str, Any] = json.loads(buf.to_pybytes())
        return result
    finally:
        client.close()


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array([f"r{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def read_only(warehouse: Path) -> RocksCatalog:
    return RocksCatalog("reader", warehouse=str(warehouse), **{"read-only": "true"})


def scan_ids(warehouse: Path, name: str = "ns.t") -> list[int]:
    cat = read_only(warehouse)
    try:
        return sorted(cat.load_table(name).scan().to_arrow().column("id").to_pylist())
    finally:
        cat.close()


def data_files_on_disk(warehouse: Path, name: str = "ns.t") -> list[Path]:
    folder = warehouse.joinpath(*name.split("."), "data")
    return sorted(folder.rglob("*.parquet")) if folder.exists() else []
