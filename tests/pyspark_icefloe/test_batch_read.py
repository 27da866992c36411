"""spark.read.format("icefloe"): every Iceberg type as SELECT * answers it, one Spark partition per
endpoint, filter pushdown on and off, and one pinned snapshot per DataFrame."""

from __future__ import annotations

import datetime as dt
import decimal
import os
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
WALK, WALK_COPY, WALK_NS = "ns.walk", "ns.walk_copy", "ns.walk_ns"


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
        _make_walk(cat)
        cat.create_table("ns.empty", pa.schema([pa.field("x", pa.int64())]))
        cat.create_table("ns.moving", pa.schema([pa.field("x", pa.int64())]))
        # ~9 MB in three incompressible files: one 16 MiB split unless sized by parallelism.
        wide = cat.create_table("ns.wide", pa.schema([pa.field("x", pa.int64()), pa.field("b", pa.binary())]))
        for k in range(3):
            wide = cat.load_table("ns.wide")
            wide.append(pa.table({"x": pa.array(range(k * 3000, k * 3000 + 3000), pa.int64()),
                                  "b": pa.array([os.urandom(1000) for _ in range(3000)], pa.binary())}))
    finally:
        cat.close()


def _walk_schema():  # type: ignore[no-untyped-def]
    """The Iceberg types the issue's type walk names, nested ones nested deeper."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        DecimalType,
        FixedType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    point = StructType(NestedField(20, "x", LongType()), NestedField(21, "label", StringType()))
    return Schema(
        NestedField(1, "k", LongType(), required=True),
        NestedField(2, "u", UUIDType()), NestedField(3, "fx", FixedType(16)), NestedField(4, "bin", BinaryType()),
        NestedField(5, "dec", DecimalType(38, 10)), NestedField(6, "tm", TimeType()),
        NestedField(8, "tstz", TimestamptzType()),
        NestedField(9, "points", ListType(10, point, element_required=False)),
        NestedField(11, "tags", MapType(12, StringType(), 13, ListType(14, LongType(), element_required=False),
                                        value_required=False)),
        NestedField(15, "outer", StructType(NestedField(16, "inner", point),
                                            NestedField(17, "ids", ListType(18, UUIDType(), element_required=False)))),
    )


WALK_ROWS = [
    dict(k=1, u=uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes, fx=bytes(range(16)), bin=b"\x00\xff\x10",
         dec=decimal.Decimal("1234567890123456789012345678.0123456789"), tm=dt.time(23, 59, 58, 999999),
         tstz=dt.datetime(2024, 2, 29, 12, 0, 1, 5, tzinfo=dt.UTC),
         points=[{"x": 1, "label": "a"}, None, {"x": -2, "label": None}],
         tags=[("k1", [1, None, 3]), ("k2", None)],
         outer={"inner": {"x": 9, "label": "in"}, "ids": [uuid.UUID(int=7).bytes, None]}),
    dict(k=2, u=None, fx=None, bin=b"", dec=decimal.Decimal("-0.0000000001"), tm=dt.time(0, 0),
         tstz=dt.datetime(1970, 1, 1, tzinfo=dt.UTC), points=[], tags=[], outer={"inner": None, "ids": []}),
    dict(k=3, u=None, fx=None, bin=None, dec=None, tm=None, tstz=None, points=None, tags=None, outer=None),
]


def _storage(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types (uuid) as their storage: pyarrow builds no nested uuid from
    Python values."""
    if isinstance(t, pa.BaseExtensionType):
        return t.storage_type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        make = pa.large_list if pa.types.is_large_list(t) else pa.list_
        return make(t.value_field.with_type(_storage(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_storage(t.key_type)), t.item_field.with_type(_storage(t.item_type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_storage(t.field(i).type)) for i in range(t.num_fields)])
    return t


def _make_walk(cat: Any) -> None:
    table = cat.create_table(WALK, _walk_schema())
    arrow = table.schema().as_arrow()
    stored = pa.schema([f.with_type(_storage(f.type)) for f in arrow])
    table.append(pa.Table.from_pylist(WALK_ROWS, schema=stored))
    cat.create_table(WALK_COPY, _walk_schema())
    # timestamp_ns needs format v3, which icefloe reads but does not write yet (nor does pyiceberg):
    # the table stays empty.
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimestampNanoType

    ns_schema = Schema(NestedField(1, "k", LongType(), required=True), NestedField(2, "tsns", TimestampNanoType()))
    cat.create_table(WALK_NS, ns_schema, properties={"format-version": "3"})


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


def test_the_type_walk_both_ways(spark: Any, server: ServerProcess) -> None:
    """uuid, fixed, binary, decimal(38), time, timestamp_ns, timestamptz and nested list / map /
    struct (structs in lists, lists in maps and structs, uuids in lists): read through the Spark
    source as SELECT * answers them, then written back through it into a table of the same
    Iceberg types and read again over Flight SQL, every value equal."""
    df = _read(spark, server, table=WALK)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {
        "k": "bigint", "u": "string", "fx": "binary", "bin": "binary", "dec": "decimal(38,10)", "tm": "time(6)",
        "tstz": "timestamp", "points": "array<struct<x:bigint,label:string>>",
        "tags": "map<string,array<bigint>>", "outer": "struct<inner:struct<x:bigint,label:string>,ids:array<string>>",
    }
    expected = sql(server.location, f"SELECT * FROM {WALK} ORDER BY k").to_pylist()
    got = sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["k"])
    # Spark shows a uuid as its text, as SQL does: compare that column's text; maps as dicts.
    texts = [{**r, "u": None if r["u"] is None else str(r["u"]), "tags": None if r["tags"] is None else dict(r["tags"]),
              "outer": r["outer"] and {**r["outer"], "ids": [None if i is None else str(i) for i in r["outer"]["ids"]]}}
             for r in expected]
    assert [_norm(r) for r in got] == [_norm(r) for r in texts]
    assert got[0]["u"] == "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    assert got[0]["dec"] == decimal.Decimal("1234567890123456789012345678.0123456789")

    df.write.format("icefloe").option("uri", server.location).option("table", WALK_COPY).mode("append").save()
    copied = sql(server.location, f"SELECT * FROM {WALK_COPY} ORDER BY k")
    original = sql(server.location, f"SELECT * FROM {WALK} ORDER BY k")
    assert copied.schema.equals(original.schema), (copied.schema, original.schema)
    assert copied.to_pylist() == original.to_pylist()

    # timestamp_ns (a v3 table): Spark has microsecond timestamps only; the column reads as
    # timestamp_ntz, and a write is refused on the driver, naming the format.
    ns_frame = _read(spark, server, table=WALK_NS)
    assert {f.name: f.dataType.simpleString() for f in ns_frame.schema.fields} == {"k": "bigint",
                                                                                   "tsns": "timestamp_ntz"}
    assert ns_frame.count() == 0
    rows = spark.createDataFrame([(1, dt.datetime(2024, 1, 1))], "k bigint, tsns timestamp_ntz")
    with pytest.raises(Exception, match="format v3"):
        rows.write.format("icefloe").option("uri", server.location).option("table", WALK_NS).mode("append").save()


def test_one_partition_per_endpoint_and_same_rows(spark: Any, server: ServerProcess) -> None:
    split = _read(spark, server, table="ns.plain", targetPartitionBytes="1", maxPartitions="4")
    parts = split.rdd.glom().map(lambda rows: sorted(r.x for r in rows)).collect()
    assert len(parts) == 4 and all(parts), "one non-empty Spark partition per endpoint"
    assert sorted(x for part in parts for x in part) == list(range(600))
    assert _read(spark, server, table="ns.plain", maxPartitions="1").rdd.getNumPartitions() == 1


def test_partitions_follow_the_parallelism_without_a_target(spark: Any, server: ServerProcess) -> None:
    """A 9 MB table is split for minPartitions=2 (it was one 16 MiB task, half of local[2] idle)."""
    sized = _read(spark, server, table="ns.wide", minPartitions="2")
    assert sized.rdd.getNumPartitions() >= 2, "at least minPartitions (the server packs whole files)"
    assert sorted(r.x for r in sized.select("x").collect()) == list(range(9000))
    assert _read(spark, server, table="ns.wide", targetPartitionBytes=str(64 << 20)).rdd.getNumPartitions() == 1


def test_columns_and_query_options(spark: Any, server: ServerProcess) -> None:
    df = _read(spark, server, table="ns.plain", columns="s, x")
    assert df.columns == ["s", "x"] and df.count() == 600
    q = _read(spark, server, query="SELECT x * 2 AS y FROM ns.plain WHERE x < 3")
    assert sorted(r.y for r in q.collect()) == [0, 2, 4]


FILTERS = [
    "x >= 150 AND x < 420",
    "x IN (1, 5, 999, 230)",
    "s LIKE 'r3-1%' OR s LIKE '%-99'",
    "NOT (x > 10) AND s LIKE '%-1%'",
    "x <=> 42 OR s = 'it''s'",
]


def test_pushdown_on_and_off_answer_the_same(spark: Any, server: ServerProcess) -> None:
    union = " OR ".join(f"({w})" for w in FILTERS)
    expected = {w: sorted(sql(server.location, "SELECT x FROM ns.plain WHERE "
                              + w.replace("<=>", "IS NOT DISTINCT FROM")).column("x").to_pylist())
                for w in [*FILTERS, union]}
    # off: Spark filters every row itself
    df = _read(spark, server, table="ns.plain").where(union)
    assert sorted(r.x for r in df.collect()) == expected[union]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        frames = [_read(spark, server, table="ns.plain", targetPartitionBytes="1").where(w) for w in FILTERS]
        for where, frame in zip(FILTERS, frames, strict=True):
            plan = frame._jdf.queryExecution().optimizedPlan().toString()
            if "OR" not in where:
                assert "Filter" not in plan, f"{where} was pushed, Spark keeps no filter: {plan}"
        tagged = frames[0].selectExpr("x", "0 AS k")
        for k, frame in enumerate(frames[1:], 1):
            tagged = tagged.unionByName(frame.selectExpr("x", f"{k} AS k"))
        got: dict[int, list[int]] = {}
        for row in tagged.collect():
            got.setdefault(row.k, []).append(row.x)
        for k, where in enumerate(FILTERS):
            assert sorted(got.get(k, [])) == expected[where], where
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_one_snapshot_per_dataframe_under_concurrent_appends(spark: Any, server: ServerProcess) -> None:
    def rows(start: int) -> pa.Table:
        return pa.table({"x": pa.array(range(start, start + 10), pa.int64())})

    first = do_put(server.location, "ns.moving", rows(0))
    df = _read(spark, server, table="ns.moving")
    empty = _read(spark, server, table="ns.empty")
    stop = threading.Event()
    appended = [10]

    def keep_appending() -> None:
        while not stop.is_set():
            do_put(server.location, "ns.moving", rows(appended[0]))
            appended[0] += 10

    writer = threading.Thread(target=keep_appending)
    writer.start()
    try:
        counts = [df.count(), df.agg({"x": "max"}).collect()[0][0]]
        do_put(server.location, "ns.empty", pa.table({"x": pa.array([1], pa.int64())}))
        counts += [df.count(), empty.count()]
    finally:
        stop.set()
        writer.join()
    assert appended[0] > 10, "appends ran during the actions"
    assert counts == [10, 9, 10, 0], "every action read the snapshot pinned at load()"
    later = _read(spark, server, table="ns.moving")
    again = _read(spark, server, table="ns.moving", snapshotId=str(first["snapshot_id"]))
    assert (later.count(), again.count()) == (appended[0], 10)


def test_bad_options_fail_with_a_precise_message(spark: Any, server: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="option uri is required"):
        spark.read.format("icefloe").option("table", "ns.plain").load()
    with pytest.raises(PySparkException, match="exactly one of the options table"):
        _read(spark, server)
    with pytest.raises(PySparkException, match="(?i)not found|does not exist"):
        _read(spark, server, table="ns.nope")
    with pytest.raises(PySparkException, match="maxPartitions must be >= 1"):
        _read(spark, server, table="ns.plain", maxPartitions="0").collect()
