"""Iceberg types -> the DuckDB types the engine's views expose.

One mapping for every path that names a column's type to DuckDB: the native scan's
``read_parquet`` schema (``native_tables``), so both scan paths bind a column the same, and SQL
writes, which type their parameters and name column types (``sqlwrite``). It names the type an
Iceberg column has in a view over the Arrow-dataset path (``iceberg_source``).
"""

from __future__ import annotations

from pyiceberg.types import DecimalType, IcebergType, ListType, MapType, StructType

from flight_server.engine.iceberg_source import quote

# Primitive types by their Iceberg name (``str(type)``).
_DUCKDB_NAMES = {
    "boolean": "BOOLEAN", "int": "INTEGER", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
    "date": "DATE", "time": "TIME", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
    "timestamp_ns": "TIMESTAMP_NS", "string": "VARCHAR", "uuid": "UUID", "binary": "BLOB",
    # DuckDB has no nanosecond TIMESTAMPTZ; microseconds is the nearest it can bind.
    "timestamptz_ns": "TIMESTAMPTZ",
}


def duckdb_type(t: IcebergType) -> str:
    """The DuckDB type SQL sees for an Iceberg type (what the engine's views expose). Struct
    fields keep their case; a type DuckDB has no match for reads as text (VARCHAR)."""
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision}, {t.scale})"
    if isinstance(t, ListType):
        return f"{duckdb_type(t.element_type)}[]"
    if isinstance(t, MapType):
        return f"MAP({duckdb_type(t.key_type)}, {duckdb_type(t.value_type)})"
    if isinstance(t, StructType):
        return "STRUCT(" + ", ".join(f"{quote(f.name)} {duckdb_type(f.field_type)}" for f in t.fields) + ")"
    text = str(t)
    if text.startswith("fixed"):
        return "BLOB"
    return _DUCKDB_NAMES.get(text, "VARCHAR")


def exact_duckdb_type(t: IcebergType) -> str | None:
    """``duckdb_type(t)`` when it is exactly the type the engine's view has for ``t``; None for
    a type it only approximates (an unknown type read as text), whose view must be asked."""
    if isinstance(t, ListType):
        return None if exact_duckdb_type(t.element_type) is None else duckdb_type(t)
    if isinstance(t, MapType):
        known = exact_duckdb_type(t.key_type) is not None and exact_duckdb_type(t.value_type) is not None
        return duckdb_type(t) if known else None
    if isinstance(t, StructType):
        return duckdb_type(t) if all(exact_duckdb_type(f.field_type) is not None for f in t.fields) else None
    text = str(t)
    if isinstance(t, DecimalType) or text.startswith("fixed") or text in _DUCKDB_NAMES:
        return duckdb_type(t) if text != "timestamptz_ns" else None
    return None
