"""Typed parameters of prepared writes (issue 39 item 1) and the smaller error fixes (item 10).

The stock JDBC driver binds with typed setters only when the parameter schema names the column's
type (``setInt`` on a ``Utf8`` parameter is refused in the driver); ADBC reads the same schema
with ``adbc_prepare`` and binds Python values or Arrow batches.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import run_java_program
from servers import ServerProcess

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def jdbc(write_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    port = write_server.location.rsplit(":", 1)[1]
    url = f"jdbc:arrow-flight-sql://127.0.0.1:{port}?useEncryption=false"
    proc = run_java_program(HERE / "jdbc" / "TypedParams.java", tmp_path_factory.mktemp("typed"), [url], 240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {name: value for _, name, value in
            (line.split(" ", 2) for line in proc.stdout.splitlines() if line.startswith("CHECK "))}


def test_jdbc_parameter_schemas_name_column_types(jdbc: dict[str, str]) -> None:
    assert jdbc["insert_param_types"] == (
        "[Int(32, true), Int(64, true), FloatingPoint(DOUBLE), Decimal(12, 3, 128), Timestamp(MILLISECOND, null), "
        "Date(DAY), Utf8, Bool, Binary, Utf8, Time(MILLISECOND, 32)]")
    assert jdbc["update_param_types"] == "[Utf8, Int(32, true)]"
    # SET amount = ? (the column), big + ? (the other operand), id + ? > 3 (the other operand)
    assert jdbc["update_expr_param_types"] == "[Decimal(12, 3, 128), Int(64, true), Int(32, true)]"
    assert jdbc["delete_param_types"] == "[Int(64, true), Bool]"
    assert jdbc["insert_select_param_types"] == "[Int(32, true), Int(32, true), Int(64, true)]"
    assert jdbc["select_param_types"] == "[Timestamp(MILLISECOND, null), Time(MILLISECOND, 32)]"


def test_jdbc_typed_setters_write_and_read_back(jdbc: dict[str, str]) -> None:
    for step in ("insert_typed", "insert_nulls", "update_typed", "update_expr", "delete_typed", "insert_select"):
        assert jdbc[step] == "1", (step, jdbc[step])
    assert jdbc["insert_batch"] == "2"
    assert jdbc["rows"] == (
        "[1,9000000000,2.5,1234.567,2024-03-04 05:06:07.123,2024-03-04,edited,true,0x0102ff,"
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,01:02:03, "
        "2,null,null,null,null,null,null,null,null,null,null, "
        "4,41,2.0,7.500,2024-01-01 00:00:00.0,2024-01-04,r4,true,0x04,null,null, "
        "101,null,null,null,null,null,edited,null,null,null,null]")
    assert jdbc["result_types"] == "[id:4, big:-5, dbl:8, amount:3, ts:93, day:91, txt:12, flag:16, raw:-3, u:12]"
    assert jdbc["select_timestamp"] == "[1]"


def _types(cursor: Any, sql: str) -> list[pa.DataType]:
    return list(cursor.adbc_prepare(sql).types)


@pytest.fixture(scope="module")
def tables(write_server: ServerProcess) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    with fsql.connect(write_server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA demo")
        cur.execute("CREATE TABLE demo.cities (city_id INTEGER NOT NULL, name VARCHAR, pop BIGINT, "
                    "area DECIMAL(10, 2), founded DATE, seen TIMESTAMPTZ, tags VARCHAR[], ok BOOLEAN)")
        cur.execute("CREATE TABLE demo.src (x INTEGER, y VARCHAR)")


@pytest.mark.usefixtures("tables")
@pytest.mark.parametrize(("sql", "expected"), [
    ("INSERT INTO demo.cities (city_id, name) VALUES (?, ?)", [pa.int32(), pa.string()]),
    ("INSERT INTO demo.cities (name, city_id) VALUES (?, ? + 1)", [pa.string(), pa.int32()]),
    ("INSERT INTO demo.cities VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
     [pa.int32(), pa.string(), pa.int64(), pa.decimal128(10, 2), pa.date32(), pa.timestamp("ms", "Etc/UTC"),
      pa.list_(pa.field("l", pa.string())), pa.bool_()]),
    ("INSERT INTO demo.cities (city_id, pop) SELECT x + ?, ? FROM demo.src WHERE y = ? LIMIT ?",
     [pa.int32(), pa.int64(), pa.string(), pa.int64()]),
    ("INSERT INTO demo.cities BY NAME SELECT ? AS name, ? AS city_id", [pa.string(), pa.int32()]),
    ("UPDATE demo.cities SET name = ? WHERE city_id = ?", [pa.string(), pa.int32()]),
    ("UPDATE demo.cities SET pop = pop * ? WHERE city_id + ? > 3 AND name LIKE ?",
     [pa.int64(), pa.int32(), pa.string()]),
    ("DELETE FROM demo.cities WHERE founded < ? OR ok = ?", [pa.date32(), pa.bool_()]),
    ("MERGE INTO demo.cities USING demo.src ON city_id = x WHEN MATCHED THEN UPDATE SET name = ? "
     "WHEN NOT MATCHED THEN INSERT (city_id, pop) VALUES (?, ?)", [pa.string(), pa.int32(), pa.int64()]),
    # No column or operator decides: text, which the write casts when it runs.
    ("INSERT INTO demo.cities (city_id) SELECT x FROM demo.src WHERE ? IS NULL", [pa.string()]),
    ("INSERT INTO demo.missing VALUES (?, ?)", [pa.string(), pa.string()]),
])
def test_adbc_sees_typed_write_parameters(conn: Any, sql: str, expected: list[pa.DataType]) -> None:
    with conn.cursor() as cur:
        assert _types(cur, sql) == expected


@pytest.mark.usefixtures("tables")
def test_adbc_binds_python_values_and_batches(conn: Any) -> None:
    with conn.cursor() as cur:
        insert = "INSERT INTO demo.cities VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        seen = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
        cur.execute(insert, (1, "oslo", 700000, Decimal("454.03"), dt.date(1048, 1, 1), seen, ["a"], True))
        batch = pa.record_batch({
            "a": pa.array([2, 3], pa.int64()), "b": ["rome", None], "c": pa.array([1, 2], pa.int16()),
            "d": pa.array([Decimal("1.5"), None], pa.decimal128(5, 1)), "e": pa.array([0, 1], pa.date32()),
            "f": pa.array([0, 1], pa.timestamp("ns", "UTC")), "g": [["x", "y"], None], "h": [False, None],
        })
        cur.executemany(insert, batch)
        cur.execute("UPDATE demo.cities SET pop = pop + ? WHERE city_id = ?", (5, 1))
        assert cur.rowcount == 1
        cur.execute("DELETE FROM demo.cities WHERE city_id = ?", (3,))
        cur.execute("SELECT * FROM demo.cities WHERE city_id <= 3 ORDER BY city_id")
        rows = cur.fetchall()
        assert rows == [
            (1, "oslo", 700005, Decimal("454.03"), dt.date(1048, 1, 1), seen, ["a"], True),
            (2, "rome", 1, Decimal("1.50"), dt.date(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
             ["x", "y"], False),
        ]
        cur.execute("DELETE FROM demo.cities WHERE city_id <= 3")


@pytest.mark.usefixtures("tables")
def test_conversion_error_names_the_column(conn: Any) -> None:
    with conn.cursor() as cur, pytest.raises(Exception) as info:
        cur.execute("INSERT INTO demo.cities (city_id, name) VALUES (?, ?)", ("abc", "x"))
    message = str(info.value)
    assert "INVALID_ARGUMENT" in message and "city_id" in message and "c0" not in message


@pytest.mark.usefixtures("tables")
@pytest.mark.parametrize("sql", ["SELECT * FROM cities", "INSERT INTO cities (city_id) VALUES (1)",
                                 "DELETE FROM Cities WHERE true"])
def test_unqualified_name_in_other_schema_gets_a_hint(conn: Any, sql: str) -> None:
    with conn.cursor() as cur, pytest.raises(Exception) as info:
        cur.execute(sql)
    assert "NOT_FOUND" in str(info.value) and "did you mean demo.cities?" in str(info.value)
