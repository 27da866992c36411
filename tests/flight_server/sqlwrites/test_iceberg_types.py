"""Every Iceberg type, both ways, through every write path a client has (issue 39 item 2).

One row per type: written with SQL INSERT, CREATE TABLE AS, a prepared INSERT bound with a
Python value and with an Arrow batch (ADBC), DoPut (pyarrow.flight) and ADBC ingest, then read
back over Flight SQL: the same value, with the Arrow type the table's column reads as.
``fixed[4]`` has no SQL spelling (DuckDB has no fixed-size binary), so its table is created
through the catalog before the server starts; the other tables are created with SQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pytest
from doput_client import do_put
from servers import ServerProcess

UTC = dt.UTC
U1 = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


# name, SQL column type (None: created through the catalog), SQL literal, value as read, Arrow type as read,
# Arrow type a client writes with (DoPut / ingest / bound batch).
CASES: list[tuple[str, str | None, str, Any, pa.DataType, pa.DataType]] = [
    ("uuid", "UUID", f"'{U1}'::UUID", U1, pa.string(), pa.uuid()),
    ("fixed", None, "'\\x01\\x02\\x03\\x04'::BLOB", b"\x01\x02\x03\x04", pa.binary(), pa.binary(4)),
    ("binary", "BLOB", "'\\x00\\xff'::BLOB", b"\x00\xff", pa.binary(), pa.binary()),
    ("decimal38", "DECIMAL(38, 10)", "1234567890123456789012345678.0123456789",
     Decimal("1234567890123456789012345678.0123456789"), pa.decimal128(38, 10), pa.decimal128(38, 10)),
    ("time", "TIME", "TIME '01:02:03.456789'", dt.time(1, 2, 3, 456789), pa.time64("us"), pa.time64("us")),
    ("timestamp", "TIMESTAMP", "TIMESTAMP '2024-03-04 05:06:07.123456'",
     dt.datetime(2024, 3, 4, 5, 6, 7, 123456), pa.timestamp("us"), pa.timestamp("us")),
    ("timestamptz", "TIMESTAMPTZ", "TIMESTAMPTZ '2024-03-04 05:06:07.5+02'",
     dt.datetime(2024, 3, 4, 3, 6, 7, 500000, tzinfo=UTC), pa.timestamp("us", "Etc/UTC"), pa.timestamp("us", "UTC")),
    ("list", "INTEGER[]", "[1, NULL, 3]", [1, None, 3], pa.list_(pa.int32()), pa.list_(pa.int32())),
    ("map", "MAP(VARCHAR, INTEGER)", "MAP {'a': 1, 'b': 2}", [("a", 1), ("b", 2)],
     pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.int32())),
    ("struct", 'STRUCT("Aa" INTEGER, b VARCHAR)', "{'Aa': 7, 'b': 'x'}", {"Aa": 7, "b": "x"},
     pa.struct([("Aa", pa.int32()), ("b", pa.string())]), pa.struct([("Aa", pa.int32()), ("b", pa.string())])),
    ("nested", "STRUCT(xs INTEGER[], m MAP(VARCHAR, STRUCT(z DOUBLE)))",
     "{'xs': [1, 2], 'm': MAP {'k': {'z': 1.5::DOUBLE}}}", {"xs": [1, 2], "m": [("k", {"z": 1.5})]},
     pa.struct([("xs", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.struct([("z", pa.float64())])))]),
     pa.struct([("xs", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.struct([("z", pa.float64())])))])),
]
IDS = [c[0] for c in CASES]


def _client_value(value: Any, typ: pa.DataType) -> pa.Array:
    if isinstance(typ, pa.UuidType):
        return pa.array([uuid.UUID(value).bytes], pa.uuid())
    return pa.array([value], typ)


def _same_type(read: pa.DataType, expected: pa.DataType) -> bool:
    """Equal up to the names of list items / map entries (DuckDB calls a list item ``l``)."""
    if pa.types.is_list(read) and pa.types.is_list(expected):
        return _same_type(read.value_type, expected.value_type)
    if pa.types.is_map(read) and pa.types.is_map(expected):
        return _same_type(read.key_type, expected.key_type) and _same_type(read.item_type, expected.item_type)
    if pa.types.is_struct(read) and pa.types.is_struct(expected):
        return [f.name for f in read] == [f.name for f in expected] and all(
            _same_type(a.type, b.type) for a, b in zip(read, expected, strict=True))
    return read == expected


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("types") / "warehouse"
    _fixed_tables(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


def _fixed_tables(warehouse: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import FixedType, NestedField

    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("types")
        for path in ("insert", "prepared", "batch", "doput", "ingest"):
            cat.create_table(f"types.fixed_{path}", Schema(NestedField(1, "c", FixedType(4), required=False)))
    finally:
        cat.close()


@pytest.fixture
def cur(server: ServerProcess) -> Iterator[Any]:
    conn = fsql.connect(server.location, autocommit=True)
    cursor = conn.cursor()
    try:
        yield cursor
    finally:
        cursor.close()
        conn.close()


def _create(cur: Any, name: str, sql_type: str | None, path: str) -> str:
    table = f"types.{name}_{path}"
    if sql_type is not None:
        cur.execute(f"CREATE TABLE {table} (c {sql_type})")
    return table


def _read_back(cur: Any, table: str, value: Any, typ: pa.DataType, rows: int = 1) -> None:
    cur.execute(f"SELECT c FROM {table}")
    result = cur.fetch_arrow_table()
    assert _same_type(result.schema.field("c").type, typ), result.schema
    assert result.column("c").to_pylist() == [value] * rows


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"), CASES, ids=IDS)
def test_sql_insert(cur: Any, name: str, sql_type: str | None, literal: str, value: Any,
                    read_type: pa.DataType, write_type: pa.DataType) -> None:
    table = _create(cur, name, sql_type, "insert")
    cur.execute(f"INSERT INTO {table} VALUES ({literal})")
    _read_back(cur, table, value, read_type)


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"),
                         [c for c in CASES if c[1] is not None], ids=[c[0] for c in CASES if c[1] is not None])
def test_create_table_as(cur: Any, name: str, sql_type: str, literal: str, value: Any,
                         read_type: pa.DataType, write_type: pa.DataType) -> None:
    cur.execute(f"CREATE TABLE types.{name}_ctas AS SELECT {literal} AS c")
    _read_back(cur, f"types.{name}_ctas", value, read_type)


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"), CASES, ids=IDS)
def test_prepared_insert_python_value(cur: Any, name: str, sql_type: str | None, literal: str, value: Any,
                                      read_type: pa.DataType, write_type: pa.DataType) -> None:
    if name in ("map", "nested"):
        pytest.skip("ADBC cannot bind a Python list of pairs as a map; the Arrow batch case covers maps")
    table = _create(cur, name, sql_type, "prepared")
    cur.execute(f"INSERT INTO {table} VALUES (?)", (value,))
    _read_back(cur, table, value, read_type)


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"), CASES, ids=IDS)
def test_prepared_insert_arrow_batch(cur: Any, name: str, sql_type: str | None, literal: str, value: Any,
                                     read_type: pa.DataType, write_type: pa.DataType) -> None:
    table = _create(cur, name, sql_type, "batch")
    column = _client_value(value, write_type)
    cur.executemany(f"INSERT INTO {table} VALUES (?)", pa.record_batch([column, ], names=["c"]))
    _read_back(cur, table, value, read_type)


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"), CASES, ids=IDS)
def test_doput(server: ServerProcess, cur: Any, name: str, sql_type: str | None, literal: str, value: Any,
               read_type: pa.DataType, write_type: pa.DataType) -> None:
    table = _create(cur, name, sql_type, "doput")
    result = do_put(server.location, tuple(table.split(".")), pa.table({"c": _client_value(value, write_type)}))
    assert result["rows"] == 1
    _read_back(cur, table, value, read_type)


@pytest.mark.parametrize(("name", "sql_type", "literal", "value", "read_type", "write_type"), CASES, ids=IDS)
def test_adbc_ingest(cur: Any, name: str, sql_type: str | None, literal: str, value: Any,
                     read_type: pa.DataType, write_type: pa.DataType) -> None:
    table = _create(cur, name, sql_type, "ingest")
    data = pa.table({"c": _client_value(value, write_type)})
    assert cur.adbc_ingest(table.split(".")[1], data, mode="append", db_schema_name="types") == 1
    _read_back(cur, table, value, read_type)


def test_uuid_from_sql_functions(cur: Any) -> None:
    """The issue's reproduction: uuid() in INSERT and CTAS, and text cast to UUID."""
    cur.execute("CREATE TABLE types.ids (u UUID)")
    cur.execute(f"INSERT INTO types.ids VALUES (uuid()), ('{U1}'::UUID), ('{U1.upper()}')")
    cur.execute("CREATE TABLE types.ids2 AS SELECT uuid() AS u, 1 AS n")
    cur.execute("SELECT count(DISTINCT u), count(*) FILTER (WHERE u = ?::UUID) FROM types.ids", (U1,))
    assert cur.fetchall() == [(2, 2)]
    cur.execute("SELECT typeof(u) FROM types.ids2")
    assert cur.fetchall() == [("UUID",)]


def test_bad_uuid_text_names_the_column(cur: Any) -> None:
    cur.execute("CREATE TABLE types.badids (id INTEGER, u UUID)")
    with pytest.raises(Exception) as info:
        cur.execute("INSERT INTO types.badids VALUES (1, 'not-a-uuid')")
    message = str(info.value)
    assert "INVALID_ARGUMENT" in message and "u" in message and "not-a-uuid" in message


def test_timestamp_ns_is_refused_precisely(cur: Any) -> None:
    with pytest.raises(Exception) as info:
        cur.execute("CREATE TABLE types.nanos (c TIMESTAMP_NS)")
    assert "INVALID_ARGUMENT" in str(info.value) and "format v3" in str(info.value)
