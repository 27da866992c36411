"""Spark (local[2]) with Iceberg's own Spark runtime against icefloe's REST catalog: CREATE
TABLE, INSERT, SELECT, CTAS, MERGE INTO, DELETE, ALTER TABLE ADD COLUMN and snapshot reads;
every Spark commit on the feed and in Flight SQL results; DoPut racing Spark loses nothing.
One Spark session for the whole module (starting one costs tens of seconds)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from tests.doput_client import do_put
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_spark_support import skip_reason, spark_session
from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url, sql
from tests.servers import ServerProcess

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("spark") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def spark(server: ServerProcess) -> Iterator[Any]:
    session = spark_session(rest_url(server), str(server.warehouse))
    session.sparkContext.setLogLevel("ERROR")
    try:
        session.sql("CREATE NAMESPACE ice.sp")
        yield session
    finally:
        session.stop()


def ids(server: ServerProcess, table: str) -> list[int]:
    return sorted(sql(server.location, f"SELECT id FROM {table}")["id"].to_pylist())


def test_spark_writes_reach_flight_sql_and_the_feed(spark: Any, server: ServerProcess) -> None:
    with FeedReader(server.location, {"feed": "commits.v1", "after": "latest", "tables": ["sp.t"]}) as feed:
        feed.wait_for("hello")
        spark.sql("CREATE TABLE ice.sp.t (id bigint, name string) USING iceberg")
        spark.sql("INSERT INTO ice.sp.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        assert ids(server, "sp.t") == [1, 2, 3]
        assert [r.id for r in spark.sql("SELECT id FROM ice.sp.t ORDER BY id").collect()] == [1, 2, 3]
        spark.sql("""MERGE INTO ice.sp.t t USING (SELECT 2 AS id, 'B' AS name UNION ALL SELECT 9, 'z') s
                     ON t.id = s.id WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT *""")
        got = sql(server.location, "SELECT id, name FROM sp.t ORDER BY id").to_pylist()
        assert got == [{"id": 1, "name": "a"}, {"id": 2, "name": "B"}, {"id": 3, "name": "c"}, {"id": 9, "name": "z"}]
        spark.sql("DELETE FROM ice.sp.t WHERE id = 1")
        assert ids(server, "sp.t") == [2, 3, 9]
        spark.sql("ALTER TABLE ice.sp.t ADD COLUMN score int")
        spark.sql("INSERT INTO ice.sp.t VALUES (4, 'd', 40)")
        got = sql(server.location, "SELECT id, score FROM sp.t WHERE score IS NOT NULL").to_pylist()
        assert got == [{"id": 4, "score": 40}]
        events = feed.events(6)
    operations = [e["operation"] for e in events]
    assert operations[0] == "create" and operations[1] == "append" and operations[-1] == "append"
    assert operations[2] in ("overwrite", "replace") and operations[3] in ("overwrite", "delete")
    assert operations[4] == "schema"
    snapshots = {r.snapshot_id for r in spark.sql("SELECT snapshot_id FROM ice.sp.t.snapshots").collect()}
    assert {e["snapshot_id"] for e in events if e["operation"] != "create" and e["operation"] != "schema"} <= snapshots
    appends = [r for r in commit_records(server.warehouse) if r.table == "t" and r.operation == "append"]
    assert appends and all(r.extra.get("engine") == "spark" and r.extra.get("via") == "rest" for r in appends)


def test_snapshot_reads_and_ctas(spark: Any, server: ServerProcess) -> None:
    spark.sql("CREATE TABLE ice.sp.snap (id bigint) USING iceberg")
    spark.sql("INSERT INTO ice.sp.snap VALUES (1), (2)")
    first = spark.sql("SELECT snapshot_id FROM ice.sp.snap.snapshots ORDER BY committed_at").collect()[0].snapshot_id
    spark.sql("INSERT INTO ice.sp.snap VALUES (3)")
    old = spark.sql(f"SELECT id FROM ice.sp.snap VERSION AS OF {first} ORDER BY id").collect()
    assert [r.id for r in old] == [1, 2]
    assert ids(server, "sp.snap") == [1, 2, 3]
    # CTAS goes through stage-create and a create transaction.
    spark.sql("CREATE TABLE ice.sp.ctas USING iceberg AS SELECT id * 10 AS id FROM ice.sp.snap")
    assert ids(server, "sp.ctas") == [10, 20, 30]
    created = [r for r in commit_records(server.warehouse) if r.table == "ctas"]
    assert [r.operation for r in created] == ["create"] and created[0].added_rows == 3


def test_doput_racing_spark_loses_neither(spark: Any, server: ServerProcess) -> None:
    # Spark retries a commit that lost the race; short waits keep it from backing off for long.
    spark.sql("CREATE TABLE ice.sp.race (id bigint, name string) USING iceberg TBLPROPERTIES ("
              "'commit.retry.num-retries' = '50', 'commit.retry.min-wait-ms' = '10', "
              "'commit.retry.max-wait-ms' = '200')")
    errors: list[BaseException] = []
    put_ids: list[int] = []
    started = threading.Event()

    def putter() -> None:
        try:
            for n in range(15):
                do_put(server.location, ("sp", "race"), pa.table({"id": [100_000 + n], "name": [f"p{n}"]}))
                put_ids.append(100_000 + n)
                started.set()
                time.sleep(0.03)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=putter)
    thread.start()
    started.wait(60)
    try:
        for batch in range(2):
            spark.sql(f"INSERT INTO ice.sp.race SELECT id, 's' FROM range({batch * 500}, {batch * 500 + 500})")
    finally:
        thread.join(120)
    assert not errors, errors
    expected = sorted(list(range(1000)) + put_ids)
    assert len(put_ids) == 15
    assert ids(server, "sp.race") == expected
    spark.sql("REFRESH TABLE ice.sp.race")  # Spark's catalog caches the table it last loaded
    assert spark.sql("SELECT count(*) AS n FROM ice.sp.race").collect()[0].n == len(expected)
    appends = [r for r in commit_records(server.warehouse) if r.table == "race" and r.operation == "append"]
    assert len(appends) == 17 and sum(1 for r in appends if r.extra.get("engine") == "spark") == 2
