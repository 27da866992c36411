"""DuckDB column definitions -> Iceberg types.

DuckDB itself parses the column definitions (``CREATE TABLE`` run in a throwaway, sandboxed
in-memory database), so every type spelling DuckDB accepts (``INT``, ``INT4``, ``STRUCT(...)``,
``MAP(...)``, ``VARCHAR[]``, ``DECIMAL(p,s)``, ...) is understood exactly as DuckDB does;
this module only maps DuckDB's resolved types to Iceberg's. ``NOT NULL`` -> required.
"""

from __future__ import annotations

from typing import Any

import duckdb
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from flight_server import errors
from flight_server.engine import messages
from flight_server.engine.iceberg_source import quote
from flight_server.engine.slots import SANDBOX_SETTINGS

_SIMPLE: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "tinyint": IntegerType(),
    "smallint": IntegerType(),
    "integer": IntegerType(),
    "utinyint": IntegerType(),
    "usmallint": IntegerType(),
    "bigint": LongType(),
    "uinteger": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "varchar": StringType(),
    "blob": BinaryType(),
    "date": DateType(),
    "time": TimeType(),
    "timestamp": TimestampType(),
    # Coarser timestamps widen to microseconds without loss.
    "timestamp_ms": TimestampType(),
    "timestamp_s": TimestampType(),
    "timestamp with time zone": TimestamptzType(),
    "uuid": UUIDType(),
}


class _Ids:
    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


def iceberg_type(t: Any, ids: _Ids, where: str) -> IcebergType:
    """Iceberg type of a ``duckdb.DuckDBPyType`` (nested fields are optional)."""
    kind = str(t.id)
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    children = dict(t.children) if kind in ("decimal", "list", "map", "array") else {}
    if kind == "decimal":
        precision, scale = int(children["precision"]), int(children["scale"])
        return DecimalType(precision, scale)
    if kind in ("list", "array"):
        element_id = ids()
        return ListType(element_id, iceberg_type(children["child"], ids, where), element_required=False)
    if kind == "map":
        key_id, value_id = ids(), ids()
        return MapType(key_id, iceberg_type(children["key"], ids, where), value_id,
                       iceberg_type(children["value"], ids, where), value_required=False)
    if kind == "struct":
        fields = []
        for name, child in t.children:
            fid = ids()
            fields.append(NestedField(fid, str(name), iceberg_type(child, ids, f"{where}.{name}"), required=False))
        return StructType(*fields)
    if kind == "timestamp_ns":
        # Iceberg's timestamp_ns is a format-v3 type, and pyiceberg cannot write v3 metadata yet.
        raise errors.InvalidArgument(
            f"column {where}: TIMESTAMP_NS needs Iceberg format v3, which icefloe cannot write yet; "
            "use TIMESTAMP (microseconds)"
        )
    raise errors.InvalidArgument(f"column {where}: type {t} has no Iceberg equivalent")


def _scratch() -> duckdb.DuckDBPyConnection:
    # No temp directory: DuckDB would let SQL read and write its default one, ``<cwd>/.tmp``.
    con = duckdb.connect(":memory:", config={**SANDBOX_SETTINGS, "temp_directory": ""})
    con.execute("SET lock_configuration = true")
    return con


def schema_from_column_defs(column_defs: list[str]) -> Schema:
    """An Iceberg schema from DuckDB column definition texts (``a INT NOT NULL``, ...).

    The texts come from a client's statement: they must make exactly one CREATE TABLE (a
    definition holding ``); COPY ... TO ...`` would otherwise be a second statement here).
    """
    con = _scratch()
    try:
        sql = f"CREATE TABLE __icefloe_def ({', '.join(column_defs)})"
        try:
            statements = con.extract_statements(sql)
            if len(statements) != 1 or statements[0].type.name != "CREATE":
                raise errors.InvalidArgument("bad column definition: it must not contain other statements")
            con.execute(sql)
        except duckdb.Error as exc:
            raise errors.InvalidArgument(f"bad column definition: {messages.clean(exc)}") from None
        except ValueError:
            raise errors.InvalidArgument("bad column definition") from None
        rel = con.sql("SELECT * FROM __icefloe_def")
        nullable = dict(con.execute(
            "SELECT column_name, is_nullable FROM duckdb_columns() WHERE table_name = '__icefloe_def'").fetchall())
        ids = _Ids()
        top_ids = [ids() for _ in rel.columns]
        fields = [
            NestedField(fid, name, iceberg_type(t, ids, name), required=not nullable.get(name, True))
            for fid, name, t in zip(top_ids, rel.columns, rel.types, strict=True)
        ]
        return Schema(*fields)
    finally:
        con.close()


def schema_from_query_types(columns: list[tuple[str, str]]) -> Schema:
    """An Iceberg schema (all columns optional) for a query result given (name, DuckDB type)."""
    seen: set[str] = set()
    for name, _ in columns:
        if name in seen:
            raise errors.InvalidArgument(f"duplicate column name {name!r}; give each column its own alias")
        seen.add(name)
    return schema_from_column_defs([f"{quote(n)} {t}" for n, t in columns])

