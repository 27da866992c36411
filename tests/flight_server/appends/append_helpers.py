"""Helpers for the append integration tests (real server, pyarrow.flight DoPut)."""

from __future__ import annotations

import pyarrow as pa

# Re-exported: the append tests take the shared DoPut client from here.
from doput_client import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER
from doput_client import do_put as do_put
from storage_kinds import Warehouse, open_catalog, table_files

from catalog import RocksCatalog


def make_table(
    warehouse: Warehouse, name: str = "ns.t", schema: pa.Schema | None = None,
    properties: dict[str, str] | None = None,
) -> None:
    """Create a table offline (before the server starts)."""
    cat = open_catalog(warehouse, "setup")
    try:
        ns = tuple(name.split(".")[:-1])
        if not cat.namespace_exists(ns):
            cat.create_namespace(ns)
        cat.create_table(
            name, schema or pa.schema([("id", pa.int64()), ("v", pa.string())]), properties=properties or {}
        )
    finally:
        cat.close()


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array([f"r{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def read_only(warehouse: Warehouse) -> RocksCatalog:
    return open_catalog(warehouse, "reader", read_only=True)


def scan_ids(warehouse: Warehouse, name: str = "ns.t") -> list[int]:
    cat = read_only(warehouse)
    try:
        return sorted(cat.load_table(name).scan().to_arrow().column("id").to_pylist())
    finally:
        cat.close()


def data_files_on_disk(warehouse: Warehouse, name: str = "ns.t") -> list[str]:
    """The table's data files in storage (local files or S3 objects), referenced or not."""
    return [f for f in table_files(warehouse, name, "*.parquet") if "/data/" in f]
