"""The JVM connector's Spark catalog (dev.icefloe.spark.FlightCatalog) and its streaming sink
against a real server: Spark SQL DDL/DML over Flight SQL only (no storage access), a writeStream
sink that commits once per epoch (also when Spark replays an epoch after a crash, and across a
kill -9 of the server), the feed subscription reconnecting after a server restart, and the
stream's include option. One Spark session (local[2]) for the module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from servers import ServerProcess, make_tables
from spark_jvm_support import FORMAT, jvm_session, missing_tools

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

CATALOG = "dev.icefloe.spark.FlightCatalog"
XS = pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())])


def _rows(start: int, n: int) -> pa.Table:
    xs = range(start, start + n)
    return pa.table({"x": pa.array(xs, pa.int64()), "s": [f"r{x}" for x in xs]}, schema=XS)


def _port(location: str) -> str:
    return location.rsplit(":", 1)[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("spark-jvm-catalog") / "warehouse"
    make_tables(warehouse, ("ns.src", "ns.dst", "ns.feed", "ns.chg", "ns.replay", "ns.replay_src", "ns.kill_src",
                              "ns.kill_dst"), XS)
    proc = ServerProcess(warehouse).start()
    # Later restarts keep the port, so a running stream's uri still names the server.
    proc.extra_args = ["--port", _port(proc.location)]
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def spark(server: ServerProcess) -> Iterator[Any]:
    session = jvm_session(conf={"spark.sql.catalog.ice": CATALOG, "spark.sql.catalog.ice.uri": server.location})
    yield session
    session.stop()


def _sql(server: ServerProcess, statement: str) -> pa.Table:
    from spark_support import sql

    return sql(server.location, statement)


def _commits(server: ServerProcess, table: str) -> int:
    namespace, _, name = table.rpartition(".")
    return int(_sql(server, f'SELECT count(*) AS n FROM "{namespace}"."{name}$snapshots"').column("n")[0].as_py())


def _xs(server: ServerProcess, table: str) -> list[int]:
    return sorted(_sql(server, f"SELECT x FROM {table}").column("x").to_pylist())


def _wait_for(condition: Any, what: str, timeout: float = 120, said: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; the drivers said:\n{said()}" if said else ""))
        time.sleep(0.2)


def _kill_and_restart(server: ServerProcess) -> None:
    server.kill()  # SIGKILL: as in a crash
    server.start()


def test_namespaces_and_tables_from_spark_sql(spark: Any, server: ServerProcess) -> None:
    spark.sql("CREATE NAMESPACE ice.sales")
    assert ["sales"] in [[r[0]] for r in spark.sql("SHOW NAMESPACES IN ice").collect()]
    assert {"ns", "sales"} <= {r[0] for r in spark.sql("SHOW NAMESPACES IN ice").collect()}
    spark.sql("CREATE TABLE ice.sales.orders (id BIGINT NOT NULL, region STRING, amount DECIMAL(10, 2), "
              "at TIMESTAMP, tags ARRAY<STRING>) PARTITIONED BY (region, days(at), bucket(4, id))")
    assert [r.tableName for r in spark.sql("SHOW TABLES IN ice.sales").collect()] == ["orders"]
    # The server made the Iceberg table: its types and its partition spec.
    schema = _sql(server, "SELECT * FROM sales.orders").schema
    assert schema.names == ["id", "region", "amount", "at", "tags"]
    assert schema.field("id").type == pa.int64() and not schema.field("id").nullable
    assert schema.field("amount").type == pa.decimal128(10, 2) and schema.field("region").type == pa.string()
    assert pa.types.is_timestamp(schema.field("at").type) and schema.field("at").type.tz is not None
    assert pa.types.is_list(schema.field("tags").type) and schema.field("tags").type.value_type == pa.string()
    spark.sql("INSERT INTO ice.sales.orders VALUES (1, 'eu', 10.50, TIMESTAMP'2024-01-02 03:04:05', array('a')), "
              "(2, 'us', 3.25, TIMESTAMP'2024-01-03 00:00:00', array()), (3, 'eu', NULL, NULL, NULL)")
    assert _commits(server, "sales.orders") == 1, "one INSERT, one commit"
    assert sorted(_sql(server, "SELECT id FROM sales.orders").column("id").to_pylist()) == [1, 2, 3]
    partitions = _sql(server, 'SELECT count(*) AS n FROM sales."orders$files"').column("n")[0].as_py()
    assert partitions == 3, "rows split by region / day / bucket into one file each"
    rows = spark.sql("SELECT id, region, amount FROM ice.sales.orders WHERE region = 'eu' ORDER BY id").collect()
    assert [(r.id, r.region, None if r.amount is None else float(r.amount)) for r in rows] == [
        (1, "eu", 10.5), (3, "eu", None)]
    spark.sql("INSERT OVERWRITE ice.sales.orders SELECT id + 10, region, amount, at, tags FROM ice.sales.orders")
    assert sorted(_sql(server, "SELECT id FROM sales.orders").column("id").to_pylist()) == [11, 12, 13]
    # ALTER TABLE as the server supports it, then RENAME and DROP.
    spark.sql("ALTER TABLE ice.sales.orders ADD COLUMN note STRING")
    spark.sql("ALTER TABLE ice.sales.orders RENAME COLUMN note TO remark")
    spark.sql("ALTER TABLE ice.sales.orders SET TBLPROPERTIES ('owner.team' = 'ops')")
    assert "remark" in spark.table("ice.sales.orders").columns
    spark.sql("INSERT INTO ice.sales.orders (id, remark) VALUES (20, 'late')")
    assert spark.sql("SELECT remark FROM ice.sales.orders WHERE id = 20").collect()[0].remark == "late"
    spark.sql("ALTER TABLE ice.sales.orders RENAME TO ice.sales.orders2")
    assert [r.tableName for r in spark.sql("SHOW TABLES IN ice.sales").collect()] == ["orders2"]
    spark.sql("DROP TABLE ice.sales.orders2")
    assert spark.sql("SHOW TABLES IN ice.sales").collect() == []
    spark.sql("DROP NAMESPACE ice.sales")
    assert "sales" not in {r[0] for r in spark.sql("SHOW NAMESPACES IN ice").collect()}


def test_catalog_refusals_are_precise_and_commit_nothing(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    spark.sql("CREATE TABLE ice.ns.once (x BIGINT)")
    with pytest.raises(Exception, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        spark.sql("CREATE TABLE ice.ns.once (x BIGINT)")
    spark.sql("CREATE TABLE IF NOT EXISTS ice.ns.once (x BIGINT)")
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("SELECT * FROM ice.ns.missing").collect()
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND|NOT_FOUND"):
        spark.sql("CREATE TABLE ice.nope.t (x BIGINT)")
    with pytest.raises(Exception, match="partition transform .* is not supported|PARTITIONED BY"):
        spark.sql("CREATE TABLE ice.ns.badpart (x BIGINT) PARTITIONED BY (sorted(x))")
    with pytest.raises(Exception, match="INVALID_ARGUMENT: .*a NOT NULL column cannot be added"):
        spark.sql("ALTER TABLE ice.ns.once ADD COLUMN y INT NOT NULL")  # refused by the server
    with pytest.raises(Exception, match="EXTRA_COLUMNS"):
        spark.createDataFrame([(1,)], "y long").writeTo("ice.ns.once").append()
    # A stream's rows are checked on the driver too (Spark checks no sink schema), before any task.
    wrong = (spark.readStream.format(FORMAT).option("uri", server.location).option("table", "ns.src").load()
             .selectExpr("x", "CAST(x AS STRING) AS nope"))
    query = (wrong.writeStream.format(FORMAT).option("uri", server.location).option("table", "ns.once")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="cannot write to ns.once: column nope is not in the table"):
        query.awaitTermination(120)
    assert _commits(server, "ns.once") == 0
    spark.sql("DROP TABLE ice.ns.once")
    spark.sql("DROP TABLE IF EXISTS ice.ns.once")
    assert server.proc is not None and server.proc.poll() is None


def _pipe(spark: Any, server: ServerProcess, source: str, target: str, checkpoint: Path) -> Any:
    stream = (spark.readStream.format(FORMAT).option("uri", server.location).option("table", source)
              .option("startingOffsets", "earliest").option("maxCommitsPerTrigger", "1").load())
    return (stream.writeStream.format(FORMAT).option("uri", server.location).option("table", target)
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())


def test_stream_sink_commits_each_epoch_once_even_when_replayed(
        spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    from spark_support import do_put

    for k in range(3):
        do_put(server.location, "ns.replay_src", _rows(k * 10, 10))
    checkpoint = tmp_path / "ck"
    query = _pipe(spark, server, "ns.replay_src", "ns.replay", checkpoint)
    try:
        _wait_for(lambda: len(_xs(server, "ns.replay")) >= 30, "three epochs in the sink")
        query.processAllAvailable()
    finally:
        query.stop()
    assert _xs(server, "ns.replay") == list(range(30)) and _commits(server, "ns.replay") == 3, "one commit an epoch"
    # What a crash between the sink's commit and Spark's commit log leaves: the last epoch's
    # commit landed, its commit-log entry did not. Spark replays that epoch on restart.
    logs = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    logs[-1].unlink()
    (checkpoint / "commits" / f".{logs[-1].name}.crc").unlink(missing_ok=True)
    query = _pipe(spark, server, "ns.replay_src", "ns.replay", checkpoint)
    try:
        _wait_for(lambda: (checkpoint / "commits" / logs[-1].name).exists(), "the replayed epoch")
        query.processAllAvailable()
    finally:
        query.stop()
    assert _xs(server, "ns.replay") == list(range(30)), "the replayed epoch's rows are not there twice"
    assert _commits(server, "ns.replay") == 3


def test_stream_sink_and_source_survive_a_server_kill(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    from spark_support import do_put

    do_put(server.location, "ns.src", _rows(0, 10))
    checkpoint = tmp_path / "ck"
    query = _pipe(spark, server, "ns.src", "ns.dst", checkpoint)
    try:
        _wait_for(lambda: len(_xs(server, "ns.dst")) >= 10, "the first epoch")
        for k in range(1, 4):
            do_put(server.location, "ns.src", _rows(k * 10, 10))
        _kill_and_restart(server)  # mid-stream: epochs may be staged, committing or planned
        for k in range(4, 6):
            do_put(server.location, "ns.src", _rows(k * 10, 10))
        # The query either rode out the outage (feed reconnect, commit retries) or failed; a
        # failed one restarts from its checkpoint, as an operator would.
        deadline = time.monotonic() + 120
        while len(_xs(server, "ns.dst")) < 60 and time.monotonic() < deadline:
            if not query.isActive:
                query = _pipe(spark, server, "ns.src", "ns.dst", checkpoint)
            time.sleep(0.3)
    finally:
        query.stop()
    assert _xs(server, "ns.dst") == list(range(60)), "every row once: none lost, none twice"


def _staged_uncommitted(server: ServerProcess, table: str) -> int:
    """How many more data files ``table`` has on disk than its snapshots list: what a task
    staged (written and fsync'd by the server) for a commit that has not come. (The server
    names no file path to a client, so the files are counted.)"""
    namespace, _, name = table.rpartition(".")
    listed = _sql(server, f'SELECT count(*) AS n FROM "{namespace}"."{name}$files"').column("n")[0].as_py()
    return len(list((server.warehouse / namespace / name / "data").rglob("*.parquet"))) - int(listed)


def test_a_driver_killed_mid_stream_restarts_with_no_loss_and_no_duplicate(
        server: ServerProcess, tmp_path: Path) -> None:
    """kill -9 of the Spark driver (its Python and its JVM) at a known point mid-batch, then a
    new driver on the same checkpoint: the stream read and the sink together land every row once.

    The kill point is waited for, not timed: the second epoch (rows 10..19) has been planned and
    logged in the checkpoint after the first was committed, its rows read from the source; one of
    its two tasks has staged its rows on the server (files on disk that no snapshot lists) and
    the other waits mid-batch (the child's marker), so the driver has not committed the epoch.
    Four source commits: the restarted driver replays the logged epoch and goes on with two more
    (each epoch costs a Spark job and a commit; more of them would prove nothing more)."""
    import os
    import signal
    import subprocess
    import sys

    from spark_support import do_put

    for k in range(4):
        do_put(server.location, "ns.kill_src", _rows(k * 10, 10))
    child = Path(__file__).with_name("spark_jvm_stream_child.py")
    marker = tmp_path / "mid-batch"
    args = [sys.executable, str(child), server.location, "ns.kill_src", "ns.kill_dst", str(tmp_path / "ck")]

    logs: list[Path] = []

    def driver(*extra: str) -> subprocess.Popen[bytes]:
        logs.append(tmp_path / f"driver-{len(logs)}.log")
        with logs[-1].open("wb") as log:  # the child keeps its own copy of the descriptor
            return subprocess.Popen([*args, *extra], start_new_session=True, stdout=log, stderr=subprocess.STDOUT)

    def said() -> str:
        return "\n".join(f"--- {p.name}:\n" + p.read_text(errors="replace")[-3000:] for p in logs)

    first = driver("15", str(marker))
    try:
        _wait_for(marker.exists, "the task holding row 15 to pause mid-batch", timeout=240, said=said)
        _wait_for(lambda: _staged_uncommitted(server, "ns.kill_dst") > 0,
                  "the epoch's other task to stage its rows", timeout=120, said=said)
        assert _xs(server, "ns.kill_dst") == list(range(10)), "one epoch committed, the second not yet"
        logged = {log: sorted(int(p.name) for p in (tmp_path / "ck" / log).iterdir() if p.name.isdigit())
                  for log in ("offsets", "commits")}
        assert logged["offsets"][-1] not in logged["commits"] and logged["commits"] == logged["offsets"][:-1], (
            f"the paused epoch is planned in the checkpoint, every earlier one committed there: {logged}")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the whole driver, mid-batch, no clean-up
        first.wait()
    second = driver()
    try:
        _wait_for(lambda: len(_xs(server, "ns.kill_dst")) >= 40, "the rest after the restart", timeout=180,
                  said=said)
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait()
    assert _xs(server, "ns.kill_dst") == list(range(40)), "every row once: none lost, none twice"
    assert _commits(server, "ns.kill_dst") == 4, "one commit per source commit"


def test_feed_reconnects_after_a_server_restart(spark: Any, server: ServerProcess) -> None:
    from spark_support import do_put

    seen: list[int] = []

    def sink(frame: Any, batch_id: int) -> None:
        seen.extend(r.x for r in frame.collect())

    stream = (spark.readStream.format(FORMAT).option("uri", server.location).option("table", "ns.feed")
              .option("startingOffsets", "latest").load())
    query = stream.writeStream.foreachBatch(sink).trigger(processingTime="0 seconds").start()
    try:
        _wait_for(lambda: query.lastProgress is not None, "the stream's first trigger")
        do_put(server.location, "ns.feed", _rows(0, 5))
        _wait_for(lambda: len(seen) >= 5, "a commit before the restart")
        server.stop()
        server.start()
        do_put(server.location, "ns.feed", _rows(5, 5))
        # The same query (not restarted): its feed subscription reconnected and saw the commit.
        _wait_for(lambda: len(seen) >= 10, "a commit after the restart", timeout=60)
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert sorted(seen) == list(range(10))


def test_include_all_streams_overwrites_as_delete_and_insert(spark: Any, server: ServerProcess) -> None:
    from spark_support import do_put

    do_put(server.location, "ns.chg", _rows(0, 3))
    _sql(server, "DELETE FROM ns.chg WHERE x = 1")
    got: list[tuple[int, str]] = []

    def sink(frame: Any, batch_id: int) -> None:
        got.extend((r.x, r._operation) for r in frame.collect())

    from collections import Counter

    for include in ("appends", "all"):
        got.clear()
        stream = (spark.readStream.format(FORMAT).option("uri", server.location).option("table", "ns.chg")
                  .option("startingOffsets", "earliest").option("include", include).load())
        assert stream.columns == ["x", "s", "_seq", "_snapshot_id", "_operation"]
        query = stream.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
        if include == "appends":
            assert sorted(got) == [(0, "append"), (1, "append"), (2, "append")], "the DELETE is not in it"
        else:
            assert (1, "delete") in got, got
            added = Counter(x for x, op in got if op != "delete")
            added.subtract(Counter(x for x, op in got if op == "delete"))
            assert +added == Counter({0: 1, 2: 1}), f"the changes replay to the table's rows: {got}"
    with pytest.raises(Exception, match="option include must be appends or all"):
        spark.readStream.format(FORMAT).option("uri", server.location).option("table", "ns.chg").option(
            "include", "some").load()


def test_save_modes_create_a_missing_table_from_the_rows(spark: Any, server: ServerProcess) -> None:
    def write(table: str, mode: str, start: int, end: int, *partition_by: str) -> None:
        frame = spark.range(start, end, 1, 2).selectExpr("id AS x", "CONCAT('r', id % 3) AS s")
        (frame.write.format(FORMAT).option("uri", server.location).option("table", table).mode(mode)
         .partitionBy(*partition_by).save())

    write("ns.made_err", "errorifexists", 0, 100)
    assert _xs(server, "ns.made_err") == list(range(100)) and _commits(server, "ns.made_err") == 1
    schema = _sql(server, "SELECT * FROM ns.made_err").schema
    assert schema.names == ["x", "s"] and schema.field("x").type == pa.int64()
    with pytest.raises(Exception, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        write("ns.made_err", "errorifexists", 0, 10)
    write("ns.made_err", "ignore", 500, 510)  # exists: nothing written
    assert _commits(server, "ns.made_err") == 1
    write("ns.made_ign", "ignore", 0, 10)  # missing: created
    assert _xs(server, "ns.made_ign") == list(range(10))
    write("ns.made_app", "append", 0, 10)
    write("ns.made_app", "append", 10, 20)
    assert _xs(server, "ns.made_app") == list(range(20)) and _commits(server, "ns.made_app") == 2
    write("ns.made_ow", "overwrite", 0, 10)
    write("ns.made_ow", "overwrite", 50, 55)
    assert _xs(server, "ns.made_ow") == list(range(50, 55))
    write("ns.made_part", "errorifexists", 0, 30, "s")
    files = _sql(server, 'SELECT count(*) AS n FROM ns."made_part$files"').column("n")[0].as_py()
    assert files == 6, "partitionBy made an identity-partitioned table (2 tasks x 3 values of s, a file each)"
    # A missing table still reads as NOT_FOUND, precisely, and the read created nothing.
    with pytest.raises(Exception, match="NOT_FOUND"):
        spark.read.format(FORMAT).option("uri", server.location).option("table", "ns.never").load().collect()
    assert "never" not in {r[1] for r in spark.sql("SHOW TABLES IN ice.ns").collect()}


def test_a_failed_write_drops_the_table_it_created(spark: Any, server: ServerProcess) -> None:
    """A save mode's write to a missing table creates it; when the job then fails, the table
    goes again (append and overwrite through the format's abort, errorifexists through Spark's
    CREATE TABLE AS SELECT), also on a second failure under the same name. A table that existed
    before the failed write stays, with its rows."""

    def failing_write(table: str, mode: str) -> None:
        # The second task fails at row 70, after the first may have staged its rows.
        frame = spark.range(0, 100, 1, 2).selectExpr(
            "id AS x", "CASE WHEN id = 70 THEN CAST(raise_error('boom at 70') AS STRING) ELSE CONCAT('r', id) END AS s")
        with pytest.raises(Exception, match="boom at 70"):
            frame.write.format(FORMAT).option("uri", server.location).option("table", table).mode(mode).save()

    def tables() -> set[str]:
        return {r[1] for r in spark.sql("SHOW TABLES IN ice.ns").collect()}

    for mode in ("append", "overwrite", "errorifexists", "append"):
        failing_write("ns.failed_new", mode)
        assert "failed_new" not in tables(), f"a failed {mode} left the table it created"
        with pytest.raises(Exception, match="NOT_FOUND"):
            spark.read.format(FORMAT).option("uri", server.location).option("table", "ns.failed_new").load().collect()
    # The name is free: a write that succeeds creates it afresh.
    (spark.range(0, 5, 1, 1).selectExpr("id AS x", "CONCAT('r', id) AS s").write.format(FORMAT)
     .option("uri", server.location).option("table", "ns.failed_new").mode("append").save())
    assert _xs(server, "ns.failed_new") == list(range(5))
    failing_write("ns.failed_new", "append")  # existed before this write: it stays, rows intact
    assert "failed_new" in tables() and _xs(server, "ns.failed_new") == list(range(5))
    assert _commits(server, "ns.failed_new") == 1
