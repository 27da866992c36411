"""The JVM Spark connector (format "icefloe-flight", clients/spark/) against a real server: parallel
columnar reads equal the server's answer, pushdown shows in the plan and in the server's query log,
writes commit exactly once (also when a task fails and is retried), bad options fail precisely.
One Spark session (local[2,3]: a failed task is retried) for the module."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from servers import ServerProcess, make_tables, serving
from spark_jvm_support import FORMAT, jvm_session, missing_tools, plan_text

# The Python workers cannot import this module: ship its functions (the failing mapInArrow) by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

XS = pa.schema([pa.field("x", pa.int64()), pa.field("g", pa.int32()), pa.field("s", pa.string()),
                pa.field("d", pa.float64())])
COLUMNS = "x long, g int, s string, d double"
ROWS_PER_APPEND = 2_000
APPENDS = 4


def _rows(start: int, n: int) -> pa.Table:
    xs = list(range(start, start + n))
    return pa.table({"x": pa.array(xs, pa.int64()), "g": pa.array([x % 7 for x in xs], pa.int32()),
                     "s": [f"r{x}" for x in xs], "d": [x / 4 for x in xs]}, schema=XS)


def _make_types(warehouse: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        DateType,
        DecimalType,
        IntegerType,
        ListType,
        LongType,
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
    schema = Schema(
        NestedField(1, "i", IntegerType()), NestedField(2, "dec", DecimalType(10, 3)), NestedField(3, "dt", DateType()),
        NestedField(4, "tm", TimeType()), NestedField(5, "ts", TimestampType()),
        NestedField(6, "tstz", TimestamptzType()),
        NestedField(7, "u", UUIDType()), NestedField(8, "bin", BinaryType()),
        NestedField(9, "lst", ListType(10, LongType(), element_required=False)),
        NestedField(11, "st", StructType(NestedField(12, "a", IntegerType()), NestedField(13, "z", StringType()))),
    )
    table = cat.create_table("ns.types", schema)
    rows = [dict(i=1, dec=decimal.Decimal("1234567.891"), dt=dt.date(2024, 1, 2), tm=dt.time(10, 11, 12, 5),
                 ts=dt.datetime(2024, 1, 2, 3, 4, 5, 123456), tstz=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
                 u=uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes, bin=b"\x00\xff", lst=[1, None, 3],
                 st={"a": 5, "z": "q"}),
            dict.fromkeys(("i", "dec", "dt", "tm", "ts", "tstz", "u", "bin", "lst", "st"))]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from spark_support import do_put

    warehouse = tmp_path_factory.mktemp("spark-jvm") / "warehouse"
    make_tables(warehouse, ("ns.big", "ns.pin", "ns.w", "ns.ow", "ns.retry", "ns.abort", "ns.st"), XS)
    _make_types(warehouse)
    with serving(warehouse) as proc:
        for k in range(APPENDS):  # several data files: a split scan has several endpoints
            do_put(proc.location, "ns.big", _rows(k * ROWS_PER_APPEND, ROWS_PER_APPEND))
        do_put(proc.location, "ns.pin", _rows(0, 10))
        yield proc


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = jvm_session(master="local[2,3]")
    yield session
    session.stop()


def _sql(server: ServerProcess, statement: str) -> pa.Table:
    from spark_support import sql

    return sql(server.location, statement)


def _read(spark: Any, server: ServerProcess, **options: str) -> Any:
    return spark.read.format(FORMAT).option("uri", server.location).options(**options).load()


def _commits(server: ServerProcess, table: str) -> int:
    namespace, _, name = table.partition(".")
    return int(_sql(server, f'SELECT count(*) AS n FROM {namespace}."{name}$snapshots"').column("n")[0].as_py())


def _logged(server: ServerProcess, mark: int, *needles: str) -> str:
    """The server's log since ``mark``, once it holds every needle (the query log writes a
    statement's line from a background thread when its last stream ends), else what it holds."""
    import time

    deadline = time.monotonic() + 20
    while True:
        log = "".join(server.log_lines[mark:])
        if all(n in log for n in needles) or time.monotonic() > deadline:
            return log
        time.sleep(0.1)


def test_parallel_columnar_read_equals_the_server(spark: Any, server: ServerProcess) -> None:
    frame = _read(spark, server, table="ns.big", targetPartitionBytes="1")
    assert frame.rdd.getNumPartitions() > 1, "one Spark partition per endpoint of the split scan"
    expected = _sql(server, "SELECT x, g, s, d FROM ns.big ORDER BY x").to_pylist()
    assert [r.asDict() for r in frame.orderBy("x").collect()] == expected
    plan = plan_text(spark, frame)
    assert "ColumnarToRow" in plan and "IcefloeFlightScan" in plan, "batches reach Spark as columns"
    # maxPartitions caps the split.
    assert _read(spark, server, table="ns.big", targetPartitionBytes="1", maxPartitions="1").rdd.getNumPartitions() == 1


def test_pruning_and_filter_pushdown_in_plan_and_query_log(spark: Any, server: ServerProcess) -> None:
    from pyspark.sql import functions as F

    mark = len(server.log_lines)
    frame = _read(spark, server, table="ns.big").where((F.col("x") >= 5000) & F.col("s").startswith("r6")).select("x")
    got = sorted(r.x for r in frame.collect())
    assert got == sorted(_sql(server, "SELECT x FROM ns.big WHERE x >= 5000 AND s LIKE 'r6%'").column("x").to_pylist())
    assert got, "the filter must keep some rows for the test to mean anything"
    plan = plan_text(spark, frame)
    assert 'SELECT "x" FROM "ns"."big" AT (VERSION =>' in plan, plan
    assert '("x" >= 5000)' in plan and 'starts_with("s", \'r6\')' in plan, plan
    needles = ('sql=SELECT "x" FROM', '("x" >= ?)', '(starts_with("s", ?))')
    log = _logged(server, mark, *needles)
    assert all(n in log for n in needles), log[-2000:]
    # A predicate that does not render (a UDF) stays with Spark and is still applied.
    odd = F.udf(lambda x: x % 1000 == 1, "boolean")
    frame = _read(spark, server, table="ns.big").where(odd(F.col("x"))).select("x")
    assert sorted(r.x for r in frame.collect()) == [1, 1001, 2001, 3001, 4001, 5001, 6001, 7001]


def test_aggregate_and_limit_pushdown(spark: Any, server: ServerProcess) -> None:
    from pyspark.sql import functions as F

    mark = len(server.log_lines)
    frame = (_read(spark, server, table="ns.big").where(F.col("x") < 7000).groupBy("g")
             .agg(F.count("*").alias("n"), F.sum("x").alias("sx"), F.min("s").alias("lo"), F.max("d").alias("hi")))
    got = sorted(tuple(r) for r in frame.collect())
    expected = _sql(server, "SELECT g, count(*), sum(x), min(s), max(d) FROM ns.big WHERE x < 7000 GROUP BY g")
    assert got == sorted(tuple(r.values()) for r in expected.to_pylist())
    plan = plan_text(spark, frame)
    assert "aggregate=server" in plan and 'GROUP BY "g"' in plan, plan
    assert "HashAggregate" not in plan, "the server answers the aggregate whole"
    assert 'GROUP BY "g"' in _logged(server, mark, 'GROUP BY "g"')
    limited = _read(spark, server, table="ns.big").limit(5)
    assert len(limited.collect()) == 5
    assert "LIMIT 5" in plan_text(spark, limited)
    # pushDownAggregate=false: Spark counts the rows of a scan that sends no column at all.
    scanned = _read(spark, server, table="ns.big", pushDownAggregate="false", targetPartitionBytes="1")
    assert scanned.count() == ROWS_PER_APPEND * APPENDS
    assert 'SELECT 1 AS "_" FROM' in plan_text(spark, scanned.groupBy().count())
    # An aggregate the server cannot answer as pushed (a UDF argument) is computed by Spark, correctly.
    total = _read(spark, server, table="ns.big").agg(F.sum(F.col("x") * 2).alias("t")).collect()[0].t
    assert total == 2 * sum(range(ROWS_PER_APPEND * APPENDS))


def test_query_option_with_pushdown_on_top(spark: Any, server: ServerProcess) -> None:
    frame = _read(spark, server, query="SELECT x, s FROM ns.big WHERE x < 100").where("x >= 90")
    assert sorted(r.x for r in frame.collect()) == list(range(90, 100))
    assert 'FROM (SELECT x, s FROM ns.big WHERE x < 100) AS q WHERE ("x" IS NOT NULL) AND ("x" >= 90)' in plan_text(
        spark, frame)


def test_every_type_arrives_as_spark_reads_it(spark: Any, server: ServerProcess) -> None:
    rows = _read(spark, server, table="ns.types").orderBy("i").collect()
    first, empty = rows[1].asDict(recursive=True), rows[0].asDict(recursive=True)
    assert first == {
        "i": 1, "dec": decimal.Decimal("1234567.891"), "dt": dt.date(2024, 1, 2), "tm": "10:11:12.000005",
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456), "tstz": dt.datetime(2024, 1, 2, 3, 4, 5),
        "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "bin": bytearray(b"\x00\xff"), "lst": [1, None, 3],
        "st": {"a": 5, "z": "q"},
    }
    assert all(v is None for v in empty.values())


def test_a_dataframe_reads_the_snapshot_pinned_when_it_was_defined(spark: Any, server: ServerProcess) -> None:
    from spark_support import do_put

    frame = _read(spark, server, table="ns.pin")
    assert frame.count() == 10
    do_put(server.location, "ns.pin", _rows(100, 5))
    assert frame.count() == 10 and frame.where("x >= 100").count() == 0, "the same snapshot, every action"
    assert _read(spark, server, table="ns.pin").count() == 15


def _write(frame: Any, server: ServerProcess, table: str, mode: str = "append", **options: str) -> None:
    frame.write.format(FORMAT).option("uri", server.location).option("table", table).options(**options).mode(
        mode).save()


def _frame(spark: Any, start: int, end: int, parts: int = 3) -> Any:
    return spark.range(start, end, 1, parts).selectExpr("id AS x", "CAST(id % 7 AS INT) AS g",
                                                        "CONCAT('r', id) AS s", "id / 4.0D AS d")


def _xs(server: ServerProcess, table: str) -> list[int]:
    return sorted(_sql(server, f"SELECT x FROM {table}").column("x").to_pylist())


def test_append_and_overwrite_commit_once_per_job(spark: Any, server: ServerProcess) -> None:
    _write(_frame(spark, 0, 3000), server, "ns.w")
    assert _xs(server, "ns.w") == list(range(3000)) and _commits(server, "ns.w") == 1
    _write(_frame(spark, 0, 0), server, "ns.w")  # nothing to append: no empty snapshot
    assert _commits(server, "ns.w") == 1
    _write(_frame(spark, 5000, 5100), server, "ns.ow")
    _write(_frame(spark, 7000, 7050), server, "ns.ow", mode="overwrite")
    assert _xs(server, "ns.ow") == list(range(7000, 7050)) and _commits(server, "ns.ow") == 2
    # Round trip: what the connector wrote reads back equal through the connector.
    back = _read(spark, server, table="ns.w").orderBy("x").collect()
    assert [r.s for r in back[:3]] == ["r0", "r1", "r2"] and back[-1].d == 2999 / 4


# Every flat Spark type the connector writes, with nulls in every column (each at its own rows)
# and strings from empty to 70 KB (past the converter's first guess of a column's bytes).
FLAT_TYPES = """SELECT id AS l, id % 2 = 0 AS b, CAST(id % 100 AS TINYINT) AS i8, CAST(id AS SMALLINT) AS i16,
  CAST(id AS INT) AS i32, CAST(id AS FLOAT) / 3 AS f, id / 7.0D AS d, CAST(id / 8 AS DECIMAL(10, 3)) AS dec,
  CAST(-id * 1000000007 AS DECIMAL(18, 0)) AS dec18, date_add(DATE'2024-01-01', CAST(id AS INT)) AS dt,
  TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
  TIMESTAMP_NTZ'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS tsn,
  CASE WHEN id % 5 = 0 THEN '' WHEN id % 97 = 1 THEN repeat('w', 70000)
       ELSE repeat(concat('é', id), CAST(id % 50 AS INT)) END AS s,
  CAST(concat('x', id) AS BINARY) AS bin FROM range(0, 600, 1, 3)"""


def _server_rows(server: ServerProcess, table: str) -> list[dict[str, Any]]:
    return _sql(server, f"SELECT * FROM {table} ORDER BY l").to_pylist()


def test_the_flat_write_converter_lands_what_sparks_own_writer_lands(spark: Any, server: ServerProcess) -> None:
    """Option writeConverter: "flat" (the connector's own, the default) and "spark" (Spark's
    ArrowWriter, the reference) write the same rows, created on write, to two tables; the server
    answers them equal, and the connector reads back what Spark wrote. Batches of 37 rows: many
    batches per task, validity bytes reused across them; empty tasks stage nothing."""
    source = spark.sql(FLAT_TYPES)
    columns = source.columns
    nulled = source.selectExpr("l", *[f"CASE WHEN l % 17 = {k} THEN NULL ELSE {c} END AS {c}"
                                      for k, c in enumerate(columns) if c != "l"])
    nulled = nulled.repartition(5, "b")  # b is true, false or null: two of five tasks get no rows
    for converter in ("flat", "spark"):
        _write(nulled, server, f"ns.conv_{converter}", mode="errorifexists", writeConverter=converter,
               writeBatchRows="37")
    flat, reference = _server_rows(server, "ns.conv_flat"), _server_rows(server, "ns.conv_spark")
    assert len(flat) == 600 and flat == reference
    assert any(r["s"] is not None and len(r["s"]) == 70000 for r in flat) and any(r["s"] == "" for r in flat)
    assert all(sum(r[c] is None for r in flat) > 0 for c in columns if c != "l"), "every column has nulls"
    back = _read(spark, server, table="ns.conv_flat").select(*columns).orderBy("l").collect()
    assert back == nulled.select(*columns).orderBy("l").collect()


def test_a_schema_the_flat_converter_does_not_take_goes_through_sparks(spark: Any, server: ServerProcess) -> None:
    """Wide decimals and nested columns: the write falls back to Spark's ArrowWriter, same rows."""
    frame = spark.sql("SELECT id AS l, CAST(id * 1000000000000 AS DECIMAL(30, 2)) AS wide, array(id, NULL) AS a "
                      "FROM range(0, 50, 1, 2)")
    _write(frame, server, "ns.conv_wide", mode="errorifexists")
    assert _read(spark, server, table="ns.conv_wide").orderBy("l").collect() == frame.orderBy("l").collect()


def _java_schema(spark: Any, ddl: str) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    return spark._jsparkSession.parseDataType(_parse_datatype_string(ddl).json())


def test_write_batch_rows_come_from_a_byte_cap_and_the_rows_width(spark: Any) -> None:
    """The rows per write batch (WriteBatchSizing, the connector's own code through py4j): the
    byte cap over the schema's estimated Arrow width, at most 131072; an explicit writeBatchRows
    wins; a batch whose real bytes reach the cap is full."""
    sizing = spark._jvm.dev.icefloe.spark.WriteBatchSizing
    cap = 8 * 1024 * 1024
    assert sizing.DEFAULT_BATCH_BYTES == cap
    narrow = _java_schema(spark, "id bigint, u int, a double, k string, ts timestamp_ntz")
    # 8 + 4 + 8 + (4 offset + 20 a string) + 8 and a validity bit each: 53 bytes, 158,275 rows under the cap.
    assert sizing.estimatedRowBytes(narrow) == 53
    assert sizing.rowsPerBatch(narrow, None, cap) == sizing.MAX_ROWS == 131_072
    wide = _java_schema(spark, ", ".join(f"s{i} string" for i in range(50)) + ", b binary")
    width = sizing.estimatedRowBytes(wide)
    assert width == math.ceil(50 * (24 + 1 / 8) + 104 + 1 / 8)
    rows = sizing.rowsPerBatch(wide, None, cap)
    assert rows * width <= cap < (rows + 1) * width and rows < 131_072
    assert sizing.rowsPerBatch(wide, 37, cap) == 37  # writeBatchRows given: it wins
    assert sizing.rowsPerBatch(_java_schema(spark, "blob binary"), None, 1024) == 1024 // 105
    assert sizing.rowsPerBatch(wide, None, 1024) == 1  # never 0
    assert sizing.full(cap, cap) and not sizing.full(cap - 1, cap)


def test_rows_wider_than_the_estimate_are_cut_at_the_byte_cap(spark: Any, server: ServerProcess) -> None:
    """Strings far wider than the estimate (40 KB where 20 bytes are assumed): the flat converter
    ends each batch at writeBatchBytes (1 MiB: about 26 rows), and every row lands once and
    intact; under a row count alone, each task's 750 rows went as one 30 MB batch."""
    frame = spark.range(0, 1500, 1, 2).selectExpr("id AS l", "repeat(CAST(id % 10 AS STRING), 40000) AS s")
    _write(frame, server, "ns.wide_rows", mode="errorifexists", writeBatchBytes=str(1024 * 1024))
    got = _sql(server, "SELECT count(*) AS n, sum(length(s)) AS chars, count(DISTINCT l) AS ls, "
                       "bool_and(s = repeat(CAST(l % 10 AS VARCHAR), 40000)) AS intact FROM ns.wide_rows").to_pylist()
    assert got == [{"n": 1500, "chars": 1500 * 40000, "ls": 1500, "intact": True}]
    assert _commits(server, "ns.wide_rows") == 1


def _fail_first_attempt_midway(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    for n, batch in enumerate(batches):
        if n == 3 and context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("killed on its first attempt")
        yield batch


def test_a_task_that_fails_and_is_retried_commits_once(spark: Any, server: ServerProcess) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        # writeBatchRows 50: the failing attempt has sent batches of its staged DoPut before it dies.
        frame = _frame(spark, 0, 2000, parts=2).mapInArrow(_fail_first_attempt_midway, COLUMNS)
        _write(frame, server, "ns.retry", writeBatchRows="50")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert _xs(server, "ns.retry") == list(range(2000)), "no row lost, none twice"
    assert _commits(server, "ns.retry") == 1


def _always_fail_partition_one(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    for batch in batches:
        context = TaskContext.get()
        if context is not None and context.partitionId() == 1:
            raise RuntimeError("this partition always fails")
        yield batch


def test_a_failed_job_commits_nothing(spark: Any, server: ServerProcess) -> None:
    frame = _frame(spark, 0, 1000, parts=2).mapInArrow(_always_fail_partition_one, COLUMNS)
    with pytest.raises(Exception, match="this partition always fails"):
        _write(frame, server, "ns.abort")
    assert _xs(server, "ns.abort") == [] and _commits(server, "ns.abort") == 0
    # A table with no snapshot reads as empty (and the pin stays empty for this DataFrame).
    empty = _read(spark, server, table="ns.abort")
    assert empty.count() == 0 and empty.agg({"x": "sum"}).collect()[0][0] is None


def test_bad_options_fail_precisely_and_the_server_lives(spark: Any, server: ServerProcess) -> None:
    cases = [
        ({"table": "ns.big"}, "option uri is required"),
        ({"uri": "http://x:1", "table": "ns.big"}, "option uri must be grpc://"),
        ({"uri": server.location}, "exactly one of the options table"),
        ({"uri": server.location, "table": "ns.big", "query": "SELECT 1"}, "exactly one of the options table"),
        ({"uri": server.location, "table": "nodot"}, "option table must be namespace.table"),
        ({"uri": server.location, "table": "ns.big", "maxPartitions": "0"}, "option maxPartitions must be >= 1"),
        ({"uri": server.location, "table": "ns.big", "targetPartitionBytes": "lots"}, "must be a whole number"),
        ({"uri": server.location, "table": "ns.big", "user": "wendy"}, "option user needs password"),
        ({"uri": server.location, "table": "ns.big", "startingOffsets": "soon"}, "option startingOffsets must be"),
        ({"uri": server.location, "table": "ns.big", "writeConverter": "fast"}, "option writeConverter must be"),
        ({"uri": server.location, "table": "ns.big", "writeBatchBytes": "10"}, "writeBatchBytes must be >= 1024"),
        ({"uri": server.location, "table": "ns.big", "writeBatchRows": "0"}, "option writeBatchRows must be >= 1"),
        ({"uri": server.location, "table": "ns.nope"}, "NOT_FOUND"),
        ({"uri": server.location, "query": "SELEC 1"}, "INVALID_ARGUMENT"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            spark.read.format(FORMAT).options(**options).load().collect()
            pytest.fail(f"no error for {options}")
    # A write whose columns the table lacks is refused before any task stages anything.
    with pytest.raises(Exception, match="(?i)nope|cannot|column"):
        _write(spark.range(3).selectExpr("id AS nope"), server, "ns.w")
    assert _commits(server, "ns.w") == 1
    assert server.proc is not None and server.proc.poll() is None
    assert _sql(server, "SELECT count(*) AS n FROM ns.big").column("n")[0].as_py() == ROWS_PER_APPEND * APPENDS


def test_coexists_with_the_python_source(spark: Any, server: ServerProcess) -> None:
    jvm = _read(spark, server, table="ns.big").where("x < 50")
    python = spark.read.format("icefloe").option("uri", server.location).option("table", "ns.big").load().where(
        "x < 50")
    assert sorted(map(tuple, jvm.collect())) == sorted(map(tuple, python.collect()))


def test_tls_login_and_token_with_no_secret_in_plans(spark: Any, tmp_path: Path) -> None:
    import pyarrow.flight as flight
    from security_support import PASSWORDS, make_pki, write_users_file

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    users = write_users_file(tmp_path / "users.toml")
    make_tables(tmp_path / "warehouse", ("ns.sec",), XS)
    proc = ServerProcess(tmp_path / "warehouse", ["--users", str(users), "--tls-cert", str(pki.server_cert),
                                                  "--tls-key", str(pki.server_key)]).start()
    try:
        tls = {"tls.rootCerts": str(pki.ca_cert)}
        secure = {"uri": proc.location, "table": "ns.sec", **tls}
        # (passwordEnv is read by the driver JVM, which may have started before this module set
        # a variable: the literal password option here.)
        _write(_frame(spark, 0, 300), proc, "ns.sec", **tls, user="wendy", password=PASSWORDS["wendy"])
        client = flight.FlightClient(proc.location, tls_root_certs=pki.ca_cert.read_bytes())
        try:
            token = client.authenticate_basic_token("rita", PASSWORDS["rita"])[1].decode().removeprefix("Bearer ")
        finally:
            client.close()
        frame = spark.read.format(FORMAT).options(**secure).option("token", token).load()
        assert sorted(r.x for r in frame.collect()) == list(range(300))
        by_login = spark.read.format(FORMAT).options(**secure).option("user", "rita").option(
            "password", PASSWORDS["rita"]).load().where("x > 5")
        assert by_login.count() == 294
        for each in (frame, by_login):
            plans = plan_text(spark, each)
            assert token not in plans and PASSWORDS["rita"] not in plans, "a secret in a Spark plan"
        with pytest.raises(Exception, match="(?i)unauthenticated"):
            spark.read.format(FORMAT).options(**secure).load().collect()
        # rita reads only (Arrow Java names PERMISSION_DENIED "UNAUTHORIZED").
        with pytest.raises(Exception, match="UNAUTHORIZED: user 'rita' has role read; this needs role write"):
            _write(_frame(spark, 0, 3), proc, "ns.sec", **tls, token=token)
    finally:
        proc.stop()


def _wait_for(condition: Any, what: str, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_stream_reads_every_commit_once_across_a_restart(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    from spark_support import do_put

    seen: list[int] = []
    batches: list[int] = []

    def sink(frame: Any, batch_id: int) -> None:
        rows = [r.x for r in frame.collect()]
        if rows:
            batches.append(batch_id)
        seen.extend(rows)

    def start(checkpoint: Path, **extra: str) -> Any:
        stream = (spark.readStream.format(FORMAT).option("uri", server.location).option("table", "ns.st")
                  .option("startingOffsets", "earliest").options(**extra).load())
        return (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="0 seconds").start())

    do_put(server.location, "ns.st", _rows(0, 10))
    do_put(server.location, "ns.st", _rows(10, 10))
    query = start(tmp_path / "ck")
    try:
        _wait_for(lambda: len(seen) >= 20, "the first two commits")
        do_put(server.location, "ns.st", _rows(20, 5))  # while running: pushed by the feed
        _wait_for(lambda: len(seen) >= 25, "a commit made while the stream runs")
    finally:
        query.stop()
    do_put(server.location, "ns.st", _rows(25, 5))  # while stopped
    query = start(tmp_path / "ck")  # the same checkpoint: resumes after the last batch
    try:
        _wait_for(lambda: len(seen) >= 30, "the commit made while the stream was stopped")
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen) == list(range(30)), "every row once: none lost, none twice"
    # maxCommitsPerTrigger 1: each of the four appends is its own micro-batch.
    seen.clear()
    batches.clear()
    query = start(tmp_path / "ck-one", maxCommitsPerTrigger="1")
    try:
        _wait_for(lambda: len(seen) >= 30, "the replay from earliest")
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen) == list(range(30)) and len(batches) == 4
