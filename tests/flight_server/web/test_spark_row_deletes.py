"""Tables Spark writes merge-on-read through icefloe's REST catalog (position delete files in
format v2, deletion vectors in v3), read by icefloe: Flight SQL (single and split scans,
time travel), the embedded API, change scans with ``include: all``, the commit log's counts,
INSERT and copy-on-write DELETE / UPDATE over them, compaction (then read by both engines),
and icefloe's refusal to write a v3 table. One Spark session for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import icefloe
from tests.doput_client import do_put
from tests.flight_server.flightsql.flightsql_wire import statement_query
from tests.flight_server.web.rest_spark_support import skip_reason, spark_session
from tests.flight_server.web.rest_support import commit_records, head_seq, rest_server, rest_url, sql
from tests.servers import ServerProcess

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

MOR = ("'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
       "'write.merge.mode'='merge-on-read'")
TABLES = [(2, False), (2, True), (3, False), (3, True)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("mor") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def spark(server: ServerProcess) -> Iterator[Any]:
    # No table cache: icefloe commits between Spark's reads.
    session = spark_session(rest_url(server), str(server.warehouse), **{"spark.sql.catalog.ice.cache-enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        session.sql("CREATE NAMESPACE ice.mor")
        yield session
    finally:
        session.stop()


def _name(version: int, partitioned: bool) -> str:
    return f"mor.t{version}{'p' if partitioned else 'u'}"


def _summary(spark: Any, server: ServerProcess, table: str) -> None:
    """icefloe's answers to the same queries equal Spark's (counts, sums, a sample of rows)."""
    queries = [
        "SELECT count(*) AS n, sum(id) AS s, count(DISTINCT name) AS d FROM {t}",
        "SELECT p, count(*) AS n, sum(id) AS s FROM {t} GROUP BY p ORDER BY p",
        "SELECT id, p, name FROM {t} WHERE id % 97 = 3 ORDER BY id",
        "SELECT count(*) AS n FROM {t} WHERE name = 'u'",
    ]
    for query in queries:
        want = [tuple(r) for r in spark.sql(query.format(t="ice." + table)).collect()]
        got = sql(server.location, query.format(t=table))
        got_rows = [tuple(int(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, float) else v
                          for v in row.values()) for row in got.to_pylist()]
        assert got_rows == [tuple(int(v) if isinstance(v, int) else v for v in r) for r in want], query
    lake = icefloe.open(str(server.warehouse), read_only=True)
    try:
        embedded = pa.table(lake.table(table).scan())
    finally:
        close = getattr(lake, "close", None)
        if close:
            close()
    spark_ids = sorted(r.id for r in spark.sql(f"SELECT id FROM ice.{table}").collect())
    assert sorted(embedded.column("id").to_pylist()) == spark_ids


def _changes(server: ServerProcess, table: str, after: int, until: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    client = flight.FlightClient(server.location)
    try:
        request = {"changes": table, "after": after, "until": until, "include": "all"}
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        rows: list[dict[str, Any]] = []
        for endpoint in info.endpoints:
            rows.extend(client.do_get(endpoint.ticket).read_all().to_pylist())
        return json.loads(info.app_metadata or b"{}"), rows
    finally:
        client.close()


@pytest.mark.parametrize(("version", "partitioned"), TABLES)
def test_merge_on_read_delete_update_merge(spark: Any, server: ServerProcess, version: int, partitioned: bool) -> None:
    table = _name(version, partitioned)
    spark.sql(f"CREATE TABLE ice.{table} (id bigint, p int, name string) USING iceberg "
              f"{'PARTITIONED BY (p)' if partitioned else ''} "
              f"TBLPROPERTIES ('format-version'='{version}', {MOR})")
    spark.sql(f"INSERT INTO ice.{table} SELECT id, CAST(id % 3 AS INT), CAST(id AS STRING) FROM range(0, 1000)")
    before_delete = head_seq(server.warehouse)
    spark.sql(f"DELETE FROM ice.{table} WHERE id < 100")
    deleted_seq = head_seq(server.warehouse)
    files = [p.name for p in (server.warehouse / "mor" / table.split(".")[1] / "data").rglob("*")]
    assert any(n.endswith(".puffin" if version == 3 else "-deletes.parquet") for n in files)
    _summary(spark, server, table)

    # The commit log counts the rows a reader sees removed.
    record = next(r for r in commit_records(server.warehouse, before_delete) if r.seq == deleted_seq)
    assert (record.added_rows, record.deleted_rows, record.data_change) == (0, 100, True)
    # A change scan shows them as deletes.
    meta, rows = _changes(server, table, before_delete, deleted_seq)
    assert sorted(r["id"] for r in rows if r["_operation"] == "delete") == list(range(100))
    assert not [r for r in rows if r["_operation"] != "delete"] and not meta.get("non_appends")

    spark.sql(f"UPDATE ice.{table} SET name = 'u' WHERE id % 10 = 1")
    updated_seq = head_seq(server.warehouse)
    _summary(spark, server, table)
    record = next(r for r in commit_records(server.warehouse, deleted_seq) if r.seq == updated_seq)
    assert (record.added_rows, record.deleted_rows) == (90, 90)
    _, rows = _changes(server, table, deleted_seq, updated_seq)
    assert sorted(r["id"] for r in rows if r["_operation"] == "delete") == list(range(101, 1000, 10))
    assert {r["name"] for r in rows if r["_operation"] == "insert"} == {"u"}

    spark.sql(f"""MERGE INTO ice.{table} t USING (SELECT id, CAST(id % 3 AS INT) AS p, 'm' AS name
                  FROM range(950, 1050)) s ON t.id = s.id
                  WHEN MATCHED AND t.id % 2 = 0 THEN DELETE
                  WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT *""")
    _summary(spark, server, table)

    # Time travel to before and after the delete.
    snapshots = [r.snapshot_id for r in spark.sql(
        f"SELECT snapshot_id FROM ice.{table}.snapshots ORDER BY committed_at").collect()]
    for snapshot, count in ((snapshots[0], 1000), (snapshots[1], 900)):
        got = sql(server.location, f"SELECT count(*) AS n FROM {table} AT (VERSION => {snapshot})")
        assert got.column("n")[0].as_py() == count
        want = spark.sql(f"SELECT count(*) FROM ice.{table} VERSION AS OF {snapshot}").collect()[0][0]
        assert want == count


def test_split_scans_apply_each_files_deletes(spark: Any, server: ServerProcess) -> None:
    spark.sql(f"CREATE TABLE ice.mor.split (id bigint, p int, name string) USING iceberg "
              f"TBLPROPERTIES ('format-version'='2', {MOR})")
    for start in range(0, 4000, 1000):
        spark.sql(f"INSERT INTO ice.mor.split SELECT id, 0, 'x' FROM range({start}, {start + 1000})")
    spark.sql("DELETE FROM ice.mor.split WHERE id % 7 = 0")
    want = sorted(r.id for r in spark.sql("SELECT id FROM ice.mor.split").collect())
    client = flight.FlightClient(server.location)
    try:
        options = flight.FlightCallOptions(headers=[(b"icefloe.scan.target-partition-bytes", b"1"),
                                                    (b"icefloe.scan.max-partitions", b"8")])
        info = client.get_flight_info(flight.FlightDescriptor.for_command(
            statement_query("SELECT id FROM mor.split")), options)
        assert len(info.endpoints) > 1
        got = sorted(i for e in info.endpoints for i in client.do_get(e.ticket).read_all().column("id").to_pylist())
    finally:
        client.close()
    assert got == want


def test_icefloe_writes_over_delete_files(spark: Any, server: ServerProcess) -> None:
    """INSERT, copy-on-write DELETE and UPDATE of icefloe over a v2 table with Spark's position
    deletes: the deleted rows stay deleted, and Spark agrees."""
    spark.sql(f"CREATE TABLE ice.mor.w (id bigint, p int, name string) USING iceberg "
              f"TBLPROPERTIES ('format-version'='2', {MOR})")
    spark.sql("INSERT INTO ice.mor.w SELECT id, 0, 'x' FROM range(0, 500)")
    spark.sql("DELETE FROM ice.mor.w WHERE id < 50")
    sql(server.location, "INSERT INTO mor.w VALUES (1000, 1, 'new')")
    sql(server.location, "DELETE FROM mor.w WHERE id >= 400 AND id < 500")
    seq = head_seq(server.warehouse)
    record = [r for r in commit_records(server.warehouse, seq - 1) if r.seq == seq][0]
    assert (record.added_rows, record.deleted_rows) == (0, 100)
    sql(server.location, "UPDATE mor.w SET name = 'y' WHERE id < 60")
    want = sorted((r.id, r.name) for r in spark.sql("SELECT id, name FROM ice.mor.w").collect())
    got = sorted((r["id"], r["name"]) for r in sql(server.location, "SELECT id, name FROM mor.w").to_pylist())
    assert got == want
    assert len(got) == 351 and sum(1 for _, n in got if n == "y") == 10


def test_compaction_applies_deletes(spark: Any, server: ServerProcess) -> None:
    spark.sql(f"CREATE TABLE ice.mor.c (id bigint, p int, name string) USING iceberg "
              f"TBLPROPERTIES ('format-version'='2', {MOR})")
    spark.sql("INSERT INTO ice.mor.c SELECT id, 0, 'x' FROM range(0, 300)")
    spark.sql("INSERT INTO ice.mor.c SELECT id, 0, 'x' FROM range(300, 600)")
    spark.sql("DELETE FROM ice.mor.c WHERE id % 3 = 0")
    want = sorted(r.id for r in spark.sql("SELECT id FROM ice.mor.c").collect())
    client = flight.FlightClient(server.location)
    try:
        body = json.dumps({"table": "mor.c"}).encode()
        report = json.loads(list(client.do_action(flight.Action("icefloe.maintain", body)))[-1].body.to_pybytes())
    finally:
        client.close()
    assert report.get("compacted_files", 0) >= 2, report
    seq = head_seq(server.warehouse)
    record = [r for r in commit_records(server.warehouse, seq - 3) if r.extra.get("maintenance")][0]
    assert record.data_change is False and (record.added_rows, record.deleted_rows) == (0, 0)
    got = sorted(sql(server.location, "SELECT id FROM mor.c").column("id").to_pylist())
    assert got == want
    spark.sql("REFRESH TABLE ice.mor.c")
    assert sorted(r.id for r in spark.sql("SELECT id FROM ice.mor.c").collect()) == want
    # Spark's delete files applied only to the rewritten files: the compaction dropped them.
    assert spark.sql("SELECT count(*) FROM ice.mor.c.delete_files").collect()[0][0] == 0


def test_v3_tables_are_read_not_written(spark: Any, server: ServerProcess) -> None:
    spark.sql("CREATE TABLE ice.mor.v3 (id bigint, name string) USING iceberg TBLPROPERTIES ('format-version'='3')")
    spark.sql("INSERT INTO ice.mor.v3 VALUES (1, 'a'), (2, 'b')")
    spark.sql("INSERT INTO ice.mor.v3 VALUES (3, 'c')")
    # Row lineage: each snapshot's first row id follows the rows added before it.
    rows = spark.sql("SELECT id, _row_id FROM ice.mor.v3 ORDER BY id").collect()
    assert [r._row_id for r in rows] == [0, 1, 2]
    assert sorted(sql(server.location, "SELECT id FROM mor.v3").column("id").to_pylist()) == [1, 2, 3]
    with pytest.raises(pa.ArrowInvalid) as put_error:  # INVALID_ARGUMENT
        do_put(server.location, ("mor", "v3"), pa.table({"id": [9], "name": ["z"]}))
    assert "format v3" in str(put_error.value) and "INVALID_ARGUMENT" in str(put_error.value)
    for statement in ("INSERT INTO mor.v3 VALUES (9, 'z')", "DELETE FROM mor.v3 WHERE id = 1"):
        with pytest.raises(Exception) as sql_error:
            sql(server.location, statement)
        assert "format v3" in str(sql_error.value) and "INVALID_ARGUMENT" in str(sql_error.value).upper()
    assert sorted(sql(server.location, "SELECT id FROM mor.v3").column("id").to_pylist()) == [1, 2, 3]


def _maintain(server: ServerProcess, table: str) -> dict[str, Any]:
    client = flight.FlightClient(server.location)
    try:
        body = json.dumps({"table": table}).encode()
        return json.loads(list(client.do_action(flight.Action("icefloe.maintain", body)))[-1].body.to_pybytes())
    finally:
        client.close()


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_icefloe_merge_on_read_read_by_spark(spark: Any, server: ServerProcess, partitioned: bool) -> None:
    """icefloe's own merge-on-read DELETE / UPDATE (position delete files, row-delta snapshots)
    read by Spark's Iceberg runtime: Spark's answers equal icefloe's, before and after
    compaction, at every snapshot (time travel); Spark then deletes on top of icefloe's files."""
    table = f"mor.i{'p' if partitioned else 'u'}"
    sql(server.location, f"CREATE TABLE {table} (id BIGINT, p INTEGER, name VARCHAR)"
                         + (" PARTITIONED BY (p)" if partitioned else ""))
    # Both granularities Spark must read: file-scoped delete files (icefloe's default, one per
    # data file) on the unpartitioned table, one delete file per partition on the other.
    granularity = "partition" if partitioned else "file"
    sql(server.location, f"ALTER TABLE {table} SET ('write.delete.mode' = 'merge-on-read', "
                         f"'write.update.mode' = 'merge-on-read', 'write.delete.granularity' = '{granularity}')")
    for start in (0, 500):
        sql(server.location, f"INSERT INTO {table} SELECT i, CAST(i % 3 AS INTEGER), CAST(i AS VARCHAR) "
                             f"FROM range({start}, {start + 500}) r(i)")
    before = head_seq(server.warehouse)
    sql(server.location, f"DELETE FROM {table} WHERE id < 100 OR id % 50 = 7")
    deleted = head_seq(server.warehouse)
    record = next(r for r in commit_records(server.warehouse, before) if r.seq == deleted)
    assert (record.operation, record.added_rows, record.deleted_rows) == ("delete", 0, 118)
    files = [p.name for p in (server.warehouse / "mor" / table.split(".")[1] / "data").rglob("*")]
    # Two data files (one per INSERT) per partition: three partitions' files, or two data files'.
    assert sum(n.endswith(".parquet") and "-deletes-" in n for n in files) == (3 if partitioned else 2)
    _summary(spark, server, table)
    meta, rows = _changes(server, table, before, deleted)
    assert len([r for r in rows if r["_operation"] == "delete"]) == 118

    sql(server.location, f"UPDATE {table} SET name = 'u' || name WHERE id % 10 = 1")
    updated = head_seq(server.warehouse)
    record = next(r for r in commit_records(server.warehouse, deleted) if r.seq == updated)
    assert (record.operation, record.added_rows, record.deleted_rows) == ("overwrite", 90, 90)
    _summary(spark, server, table)
    snapshots = [r.snapshot_id for r in spark.sql(
        f"SELECT snapshot_id FROM ice.{table}.snapshots ORDER BY committed_at").collect()]
    for snapshot, count in ((snapshots[1], 1000), (snapshots[2], 882), (snapshots[3], 882)):
        got = sql(server.location, f"SELECT count(*) AS n FROM {table} AT (VERSION => {snapshot})")
        assert got.column("n")[0].as_py() == count
        assert spark.sql(f"SELECT count(*) FROM ice.{table} VERSION AS OF {snapshot}").collect()[0][0] == count

    report = _maintain(server, table)
    # icefloe.maintain compacts unpartitioned tables only (catalog.maintenance).
    assert report.get("compacted_files", 0) >= (0 if partitioned else 2), report
    if not partitioned:  # the delete files applied only to rewritten files: dropped, as Spark sees
        assert spark.sql(f"SELECT count(*) FROM ice.{table}.delete_files").collect()[0][0] == 0
    _summary(spark, server, table)
    # Spark's own merge-on-read DELETE over the compacted table, then icefloe's again.
    spark.sql(f"DELETE FROM ice.{table} WHERE id % 7 = 0")
    sql(server.location, f"DELETE FROM {table} WHERE id % 11 = 0")
    _summary(spark, server, table)
    want = spark.sql(f"SELECT count(*) FROM ice.{table}").collect()[0][0]
    assert want == sum(1 for i in range(1000) if not (i < 100 or i % 50 == 7 or i % 7 == 0 or i % 11 == 0))


def test_merge_on_read_on_v3_is_refused(spark: Any, server: ServerProcess) -> None:
    spark.sql(f"CREATE TABLE ice.mor.v3m (id bigint) USING iceberg TBLPROPERTIES ('format-version'='3', {MOR})")
    spark.sql("INSERT INTO ice.mor.v3m VALUES (1), (2)")
    seq = head_seq(server.warehouse)
    for statement in ("DELETE FROM mor.v3m WHERE id = 1", "UPDATE mor.v3m SET id = 3 WHERE id = 1"):
        with pytest.raises(Exception) as error:
            sql(server.location, statement)
        assert "format v3" in str(error.value) and "INVALID_ARGUMENT" in str(error.value).upper()
    assert head_seq(server.warehouse) == seq


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_icefloe_merge_equals_sparks(spark: Any, server: ServerProcess, mode: str) -> None:
    """The same MERGE run by Spark on one table and by icefloe (SQL over Flight) on a twin:
    both engines read both tables alike (icefloe's MERGE files are valid for Spark)."""
    suffix = mode.split("-")[0]
    for owner in ("spark", "ours"):
        spark.sql(f"CREATE TABLE ice.mor.m_{owner}_{suffix} (id bigint, p int, name string) USING iceberg "
                  f"PARTITIONED BY (p) TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='{mode}')")
        spark.sql(f"INSERT INTO ice.mor.m_{owner}_{suffix} SELECT id, CAST(id % 3 AS INT), CAST(id AS STRING) "
                  "FROM range(0, 600)")
    merge = ("MERGE INTO {t} t USING (SELECT id, CAST(id % 3 AS INT) AS p, 'm' AS name FROM range(500, 700)) s "
             "ON t.id = s.id WHEN MATCHED AND t.id % 4 = 0 THEN DELETE "
             "WHEN MATCHED THEN UPDATE SET name = concat(t.name, s.name) "
             "WHEN NOT MATCHED AND s.id % 2 = 0 THEN INSERT *")
    spark.sql(merge.format(t=f"ice.mor.m_spark_{suffix}"))
    sql(server.location, merge.format(t=f"mor.m_ours_{suffix}").replace("range(500, 700)",
                                                                     "range(500, 700) r(id)"))
    query = "SELECT id, p, name FROM {t} ORDER BY id"
    want = [tuple(r) for r in spark.sql(query.format(t=f"ice.mor.m_spark_{suffix}")).collect()]
    spark.sql(f"REFRESH TABLE ice.mor.m_ours_{suffix}")
    assert [tuple(r) for r in spark.sql(query.format(t=f"ice.mor.m_ours_{suffix}")).collect()] == want
    for owner in ("spark", "ours"):
        got = sql(server.location, query.format(t=f"mor.m_{owner}_{suffix}")).to_pylist()
        assert [(r["id"], r["p"], r["name"]) for r in got] == want, owner
    assert len(want) == 600 - 25 + 50
