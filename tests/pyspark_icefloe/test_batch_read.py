"""spark.read.format("icefloe"): every Iceberg type as SELECT * answers it, one Spark partition per
endpoint, filter pushdown on and off, and one pinned snapshot per DataFrame."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from servers import ServerProcess, serving
from spark_support import do_put, sql

ALL = "ns.all_types"


def _make(warehouse: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
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

    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("ns")
        schema = Schema(
            NestedField(1, "b", BooleanType()), NestedField(2, "i", IntegerType()), NestedField(3, "l", LongType()),
            NestedField(4, "f", FloatType()), NestedField(5, "d", DoubleType()),
            NestedField(6, "dec", DecimalType(10, 3)), NestedField(7, "dt", DateType()),
            NestedField(8, "tm", TimeType()), NestedField(9, "ts", TimestampType()),
            NestedField(10, "tstz", TimestamptzType()), NestedField(11, "s", StringType()),
            NestedField(12, "u", UUIDType()), NestedField(13, "fx", FixedType(4)),
            NestedField(14, "bin", BinaryType()),
            NestedField(15, "lst", ListType(16, LongType(), element_required=False)),
            NestedField(17, "st", StructType(NestedField(18, "a", IntegerType()), NestedField(19, "z", StringType()))),
            NestedField(20, "mp", MapType(21, StringType(), 22, LongType(), value_required=False)),
            NestedField(23, "req", LongType(), required=True),
        )
        table = cat.create_table(ALL, schema)
        rows = [
            dict(b=True, i=1, l=2**40, f=1.5, d=2.25, dec=decimal.Decimal("1234567.891"), dt=dt.date(2024, 1, 2),
                 tm=dt.time(10, 11, 12, 5), ts=dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
                 tstz=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), s="it's \"quoted\"",
                 u=uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes, fx=b"abcd", bin=b"\x00\xff",
                 lst=[1, None, 3], st={"a": 5, "z": "q"}, mp=[("k", 1), ("m", None)], req=7),
            {**{k: None for k in ("b", "i", "l", "f", "d", "dec", "dt", "tm", "ts", "tstz", "s", "u", "fx", "bin",
                                  "lst", "st", "mp")}, "req": 8},
        ]
        table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
        plain = cat.create_table("ns.plain", pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())]))
        for k in range(6):
            plain = cat.load_table("ns.plain")
            plain.append(pa.table({"x": pa.array(range(k * 100, k * 100 + 100), pa.int64()),
                                   "s": [f"r{k}-{j}" for j in range(100)]}))
        cat.create_table("ns.empty", pa.schema([pa.field("x", pa.int64())]))
        cat.create_table("ns.moving", pa.schema([pa.field("x", pa.int64())]))
    finally:
        cat.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("spark-batch") / "warehouse"
    _make(warehouse)
    with serving(warehouse) as proc:
        yield proc


def _read(spark: Any, server: ServerProcess, **options: str) -> Any:
    reader = spark.read.format("icefloe").option("uri", server.location)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _norm(value: Any) -> Any:
    """Spark's and Arrow's Python values side by side: maps as dicts, rows as dicts, UTC datetimes."""
    if isinstance(value, list) and value and isinstance(value[0], tuple) and len(value[0]) == 2:
        return dict(value)
    if hasattr(value, "asDict"):
        return {k: _norm(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return value


def test_every_type_reads_as_select_star_answers_it(spark: Any, server: ServerProcess) -> None:
    df = _read(spark, server, table=ALL)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {
        "b": "boolean", "i": "int", "l": "bigint", "f": "float", "d": "double", "dec": "decimal(10,3)",
        "dt": "date", "tm": "time(6)", "ts": "timestamp_ntz", "tstz": "timestamp", "s": "string", "u": "string",
        "fx": "binary", "bin": "binary", "lst": "array<bigint>", "st": "struct<a:int,z:string>",
        "mp": "map<string,bigint>", "req": "bigint",
    }
    expected = sorted(sql(server.location, f"SELECT * FROM {ALL}").to_pylist(), key=lambda r: r["req"])
    got = sorted((r.asDict() for r in df.collect()), key=lambda r: r["req"])
    assert [{k: _norm(v) for k, v in r.items()} for r in got] == [{k: _norm(v) for k, v in r.items()}
                                                                  for r in expected]
    assert got[0]["u"] == "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
