"""One Iceberg -> DuckDB type mapping (``engine/duckdb_types.py``) for the native scan path and
SQL writes, held against what DuckDB itself binds.

Every Iceberg type either of its users handled is checked: the name ``duckdb_type`` gives must be the
type DuckDB binds for the column of a view over the Arrow-dataset path (built as
``iceberg_source`` builds it), wherever ``exact_duckdb_type`` claims it is exact; and the native
path's ``read_parquet`` field-id mapping (``native_tables``) must bind each type it takes as
that same type, over a real Parquet file.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
    UUIDType,
)

from flight_server.engine import native_tables
from flight_server.engine.duckdb_types import duckdb_type, exact_duckdb_type
from flight_server.engine.iceberg_source import empty_table, small_types

# What the native path reads itself; the rest keep the Arrow path (native_tables.refusal).
FIELD_ID_TYPES: list[IcebergType] = [
    BooleanType(), IntegerType(), LongType(), FloatType(), DoubleType(), DecimalType(10, 2),
    DecimalType(38, 10), DateType(), TimeType(), TimestampType(), TimestamptzType(), StringType(),
    BinaryType(),
]
ARROW_PATH_TYPES: list[IcebergType] = [
    TimestampNanoType(), TimestamptzNanoType(), UUIDType(), FixedType(16), UnknownType(),
    ListType(1, IntegerType()),
    MapType(1, StringType(), 2, LongType()),
    StructType(NestedField(1, "Mixed Case", StringType()), NestedField(2, "x", ListType(3, DecimalType(5, 1)))),
    ListType(1, StructType(NestedField(2, "u", UUIDType()), NestedField(3, "t", TimestamptzType()))),
]
# Types DuckDB cannot bind as the view does; ``duckdb_type`` names the nearest it can.
APPROXIMATED = {"timestamptz_ns", "unknown"}


def _column(t: IcebergType, field_id: int = 1000) -> Schema:
    return Schema(NestedField(field_id, "c", t, required=False))


def _arrow_view_type(con: duckdb.DuckDBPyConnection, t: IcebergType) -> duckdb.DuckDBPyType:
    """The type of column ``c`` in a view over the Arrow-dataset path, built as it builds it."""
    arrow = schema_to_pyarrow(_column(t), include_field_ids=False)
    rows = empty_table(pa.schema([f.with_type(small_types(f.type)) for f in arrow]))
    con.register("arrow_path", rows)
    return con.sql("SELECT c FROM arrow_path").types[0]


def _bound(con: duckdb.DuckDBPyConnection, name: str) -> duckdb.DuckDBPyType:
    return con.sql(f"SELECT NULL::{name} AS c").types[0]


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(":memory:")


@pytest.mark.parametrize("t", FIELD_ID_TYPES + ARROW_PATH_TYPES, ids=str)
def test_the_named_type_is_the_one_the_view_binds(con: duckdb.DuckDBPyConnection, t: IcebergType) -> None:
    view = _arrow_view_type(con, t)
    named = _bound(con, duckdb_type(t))  # every name must parse in DuckDB
    exact = exact_duckdb_type(t)
    if str(t) in APPROXIMATED:
        assert exact is None, f"{t}: DuckDB binds {view}, which {duckdb_type(t)} only approximates"
        assert named != view
    else:
        assert exact == duckdb_type(t)
        assert named == view, f"{t}: the view binds {view}, the mapping names {duckdb_type(t)}"


@pytest.mark.parametrize("t", FIELD_ID_TYPES, ids=str)
def test_the_native_read_binds_each_type_it_takes_as_the_arrow_path(
    con: duckdb.DuckDBPyConnection, tmp_path: Path, t: IcebergType
) -> None:
    assert native_tables.duckdb_type(t) == duckdb_type(t)
    written = _column(t, field_id=7)
    path = tmp_path / "data.parquet"
    pq.write_table(empty_table(schema_to_pyarrow(written, include_field_ids=True)), path)
    # The read schema renames the column by field id, as a renamed Iceberg column reads.
    read = Schema(NestedField(7, "renamed", t, required=False))
    columns, schema_map, select = native_tables.field_id_read(read)
    rel = con.sql(f"SELECT {select} FROM read_parquet('{path}', schema = {schema_map}) AS d")
    assert rel.columns == ["renamed"]
    assert rel.types[0] == _arrow_view_type(con, t)


@pytest.mark.parametrize("t", ARROW_PATH_TYPES, ids=str)
def test_the_native_path_leaves_the_other_types_to_the_arrow_path(t: IcebergType) -> None:
    assert native_tables.duckdb_type(t) is None
