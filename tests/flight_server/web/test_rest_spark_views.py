"""Spark (local[2]) with Iceberg's own Spark runtime and icefloe sharing Iceberg views through
the REST catalog: a view Spark creates (Spark SQL) is queried over Flight SQL; a view icefloe
creates (CREATE VIEW over Flight SQL) is read by Spark; Spark's REPLACE and DROP land as
commits. One Spark session for the module (starting one costs tens of seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.flight_server.web.rest_spark_support import skip_reason, spark_session
from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url, sql
from tests.servers import ServerProcess

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("sparkviews") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def spark(server: ServerProcess) -> Iterator[Any]:
    session = spark_session(rest_url(server), str(server.warehouse))
    session.sparkContext.setLogLevel("ERROR")
    try:
        session.sql("CREATE NAMESPACE ice.spv")
        session.sql("CREATE TABLE ice.spv.t (id BIGINT, name STRING) USING iceberg")
        session.sql("INSERT INTO ice.spv.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        yield session
    finally:
        session.stop()


def test_a_view_spark_creates_is_queried_over_flight_sql(spark: Any, server: ServerProcess) -> None:
    spark.sql("CREATE VIEW ice.spv.v AS SELECT id, upper(name) AS loud FROM ice.spv.t WHERE id > 1")
    got = sql(server.location, "SELECT id, loud FROM spv.v ORDER BY id").to_pylist()
    assert got == [{"id": 2, "loud": "B"}, {"id": 3, "loud": "C"}]
    spark.sql("CREATE OR REPLACE VIEW ice.spv.v AS SELECT id FROM ice.spv.t WHERE id = 1")
    assert sql(server.location, "SELECT id FROM spv.v").to_pylist() == [{"id": 1}]
    spark.sql("DROP VIEW ice.spv.v")
    operations = [r.operation for r in commit_records(server.warehouse) if r.table == "v"]
    assert operations == ["view-create", "view-replace", "view-drop"]


def test_a_view_icefloe_creates_is_read_by_spark(spark: Any, server: ServerProcess) -> None:
    sql(server.location, "CREATE VIEW spv.mine AS SELECT id, name FROM spv.t WHERE id <= 2")
    rows = spark.sql("SELECT id, name FROM ice.spv.mine ORDER BY id").collect()
    assert [(r.id, r.name) for r in rows] == [(1, "a"), (2, "b")]
    assert [r.viewName for r in spark.sql("SHOW VIEWS IN ice.spv").collect()] == ["mine"]
