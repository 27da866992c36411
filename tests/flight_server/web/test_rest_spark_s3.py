"""Spark (local[2]) with Iceberg's runtime and ``iceberg-aws-bundle`` on an S3 warehouse, through
icefloe's REST catalog: Spark has no storage settings of its own (no endpoint, keys or region;
the AWS variables are removed from its environment) and reads and writes the tables' objects on
the real S3 server with what the catalog vends. icefloe sees every Spark commit in Flight SQL
and on the feed; Spark reads icefloe's own appends."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from s3_support import BUCKET, S3Server

from tests.doput_client import do_put
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_spark_support import skip_reason, spark_session
from tests.flight_server.web.rest_support import rest_url, sql
from tests.servers import ServerProcess

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                 "AWS_ENDPOINT_URL")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("spark-s3")
    proc = ServerProcess(root / "unused", ["--warehouse", f"s3://{BUCKET}/spark", "--catalog-path",
                                           str(root / "catalog"), "--rest-port", "0"], env=s3_server.env()).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def spark(server: ServerProcess) -> Iterator[Any]:
    # The JVM inherits this process's environment: nothing of the store may come from it.
    saved = {name: os.environ.pop(name) for name in AWS_VARIABLES if name in os.environ}
    os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the icefloe source's Python workers
    session = spark_session(rest_url(server), f"s3://{BUCKET}/spark", aws=True)
    session.sparkContext.setLogLevel("ERROR")
    try:
        session.sql("CREATE NAMESPACE ice.sp")
        yield session
    finally:
        session.stop()
        os.environ.pop("AWS_CONFIG_FILE", None)
        os.environ.pop("AWS_SHARED_CREDENTIALS_FILE", None)
        os.environ.update(saved)


def test_spark_reads_and_writes_s3_tables_with_the_vended_settings(spark: Any, server: ServerProcess,
                                                                   s3_server: S3Server) -> None:
    with FeedReader(server.location, {"feed": "commits.v1", "after": "latest", "tables": ["sp.t"]}) as feed:
        feed.wait_for("hello")
        spark.sql("CREATE TABLE ice.sp.t (id bigint, name string) USING iceberg")
        spark.sql("INSERT INTO ice.sp.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        spark.sql("""MERGE INTO ice.sp.t t USING (SELECT 2 AS id, 'B' AS name UNION ALL SELECT 9, 'z') s
                     ON t.id = s.id WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT *""")
        spark.sql("DELETE FROM ice.sp.t WHERE id = 1")
        got = sql(server.location, "SELECT id, name FROM sp.t ORDER BY id").to_pylist()
        assert got == [{"id": 2, "name": "B"}, {"id": 3, "name": "c"}, {"id": 9, "name": "z"}]
        operations = [e["operation"] for e in feed.events(4, timeout=120)]
    assert operations[0] == "create" and len(operations) == 4, operations
    # Spark's files are objects under the table's prefix on the S3 server.
    keys = s3_server.keys("spark/sp/t")
    assert any("/data/" in k and k.endswith(".parquet") for k in keys), keys
    # icefloe's own append, read by Spark.
    do_put(server.location, ("sp", "t"), pa.table({"id": pa.array([100], pa.int64()), "name": ["icefloe"]}))
    spark.sql("REFRESH TABLE ice.sp.t")
    rows = spark.sql("SELECT id, name FROM ice.sp.t ORDER BY id").collect()
    assert [(r.id, r.name) for r in rows] == [(2, "B"), (3, "c"), (9, "z"), (100, "icefloe")]
    count = spark.sql("SELECT count(*) AS n, sum(id) AS s FROM ice.sp.t").collect()[0]
    assert (count.n, count.s) == (4, 114)


def test_spark_source_on_an_s3_backed_server(spark: Any, server: ServerProcess) -> None:
    """The ``icefloe`` Spark source (Python data source over Flight) on the same S3-backed server."""
    from pyspark_icefloe import register

    register(spark)
    sql(server.location, "CREATE TABLE sp.src (id BIGINT, v VARCHAR)")
    df = spark.range(0, 50, numPartitions=2).selectExpr("id", "concat('v', id) AS v")
    df.write.format("icefloe").option("uri", server.location).option("table", "sp.src").mode("append").save()
    back = spark.read.format("icefloe").option("uri", server.location).option("table", "sp.src").load()
    assert sorted(r.id for r in back.collect()) == list(range(50))
    assert sql(server.location, "SELECT count(*) AS n FROM sp.src").to_pylist() == [{"n": 50}]
