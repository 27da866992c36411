"""What a Spark user sees when a name is wrong: a typo'd table is named as written, with the
server's "did you mean" (not an internal ``t$history`` name); a write to a missing table fails on
the driver before any task starts, and ``.option("create", "true")`` creates it from the
DataFrame's columns; a write whose columns differ from the table's only in case lands under the
table's names; one with a column the table lacks is refused naming it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark import cloudpickle
from servers import ServerProcess
from spark_support import serving_tables, sql

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving_tables(tmp_path_factory.mktemp("spark-errors") / "warehouse", ("ns.big", "ns.case")) as proc:
        yield proc


def _message(exc: BaseException) -> str:
    return str(exc)



def test_a_typo_d_table_is_named_as_written_with_a_suggestion(spark: Any, server: ServerProcess) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("icefloe").option("uri", server.location).option("table", "ns.bgi").load().collect()
    message = _message(info.value)
    assert "table ns.bgi does not exist (did you mean ns.big?)" in message, message
    assert "bgi$history" not in message  # (the internal metadata-table name it used to name)


def test_a_write_to_a_missing_table_fails_on_the_driver_or_creates_it(spark: Any, server: ServerProcess) -> None:
    df = spark.range(0, 10, numPartitions=2).selectExpr("id AS x", "concat('v', id) AS s")
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(Exception) as info:
        df.write.format("icefloe").option("uri", server.location).option("table", "ns.bigg").mode("append").save()
    message = _message(info.value)
    assert "table ns.bigg does not exist (did you mean ns.big?)" in message, message
    assert '.option("create", "true")' in message
    # Refused while planning, on the driver: no Spark job (so no task) ran for the write.
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before
    (df.write.format("icefloe").option("uri", server.location).option("table", "made.fresh").option("create", "true")
     .mode("append").save())
    got = sql(server.location, "SELECT count(*) AS n, max(s) AS m FROM made.fresh")
    assert got.to_pylist() == [{"n": 10, "m": "v9"}]
    # Exists now: create is a no-op and the write appends.
    (df.write.format("icefloe").option("uri", server.location).option("table", "made.fresh").option("create", "true")
     .mode("append").save())
    assert sql(server.location, "SELECT count(*) AS n FROM made.fresh").to_pylist() == [{"n": 20}]


def test_columns_that_differ_only_in_case_are_the_table_s(spark: Any, server: ServerProcess) -> None:
    df = spark.range(0, 5, numPartitions=2).selectExpr("id AS X", "concat('v', id) AS S")
    df.write.format("icefloe").option("uri", server.location).option("table", "ns.case").mode("append").save()
    got = sql(server.location, "SELECT x, s FROM ns.case ORDER BY x")
    assert got.column_names == ["x", "s"] and got.column("x").to_pylist() == [0, 1, 2, 3, 4]


def test_a_column_the_table_lacks_is_named(spark: Any, server: ServerProcess) -> None:
    df = spark.range(0, 5, numPartitions=2).selectExpr("id AS x", "concat('v', id) AS ss")
    with pytest.raises(Exception) as info:
        df.write.format("icefloe").option("uri", server.location).option("table", "ns.case").mode("append").save()
    message = _message(info.value)
    assert "the DataFrame's column 'ss' (did you mean 's'?) is not in the table (its columns: x, s)" in message, \
        message
    assert "without staging" not in message
    with pytest.raises(Exception, match="option schema-policy must be one of match, strict, evolve, not 'grow'"):
        (df.write.format("icefloe").option("uri", server.location).option("table", "ns.case")
         .option("schema-policy", "grow").mode("append").save())


def test_schema_policy_evolve_adds_and_widens_columns_before_the_tasks(spark: Any, server: ServerProcess) -> None:
    """``schema-policy`` ``evolve``, as the DoPut header means it: new DataFrame columns are added
    (nullable), a narrower table column is widened, then the rows land in one commit; without
    the option the same write is refused naming the column."""
    sql(server.location, "CREATE TABLE ns.evo (id INTEGER, s VARCHAR)")
    sql(server.location, "INSERT INTO ns.evo VALUES (1, 'old')")
    df = spark.range(10, 14, numPartitions=2).selectExpr("id", "concat('v', id) AS s",
                                                         "CAST(id AS DOUBLE) / 2 AS score")

    def write(frame: Any, table: str, **options: str) -> None:
        writer = frame.write.format("icefloe").option("uri", server.location).option("table", table)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.mode("append").save()

    with pytest.raises(Exception) as info:
        write(df, "ns.evo")
    assert "the DataFrame's column 'score' is not in the table" in _message(info.value)
    write(df, "ns.evo", **{"schema-policy": "evolve"})
    schema = sql(server.location, "SELECT * FROM ns.evo").schema
    assert [(f.name, str(f.type)) for f in schema] == [("id", "int64"), ("s", "string"), ("score", "double")]
    got = sql(server.location, "SELECT id, s, score FROM ns.evo ORDER BY id").to_pylist()
    assert got == [{"id": 1, "s": "old", "score": None}] + [
        {"id": i, "s": f"v{i}", "score": i * 0.5} for i in range(10, 14)]
    # Once evolved, evolving again changes nothing and the rows append.
    write(df, "ns.evo", **{"schema-policy": "evolve"})
    assert sql(server.location, "SELECT count(*) AS n FROM ns.evo").to_pylist() == [{"n": 9}]

    # A change Iceberg cannot make (text to a number) is refused on the driver; nothing lands.
    clash = spark.range(0, 2, numPartitions=2).selectExpr("id", "id AS s")
    with pytest.raises(Exception) as info:
        write(clash, "ns.evo", **{"schema-policy": "evolve"})
    assert "cannot evolve ns.evo to the DataFrame's columns" in _message(info.value), _message(info.value)
    assert "'s'" in _message(info.value)
    assert sql(server.location, "SELECT count(*) AS n FROM ns.evo").to_pylist() == [{"n": 9}]
