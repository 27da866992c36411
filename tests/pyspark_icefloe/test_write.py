"""df.write / writeStream .format("icefloe") on two-phase appends: one commit per job, overwrite
(one commit, never an empty table to a concurrent reader), a task that fails and is retried (no
duplicates), an aborted job (nothing visible), and a streaming micro-batch replayed after a crash
(a duplicate, not a second append). Also the shared options: TLS, logins, token files, no secret
in plans, retries across a server restart. The tests marked ``ON_BOTH_STORAGES`` also run over an
S3 warehouse (the module's server once per storage): the tasks' staged files are objects."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

# The Python workers cannot import this test module: ship its functions by value.
from pyspark import cloudpickle  # noqa: E402
from servers import ServerProcess, make_tables
from spark_support import XS_SCHEMA, do_put, make_session, serving_tables, sql
from storage_kinds import fresh_warehouse

cloudpickle.register_pickle_by_value(sys.modules[__name__])


PASSWORD_ENV = "ICEFLOE_SPARK_TEST_PASSWORD"
ON_BOTH_STORAGES = pytest.mark.parametrize("write_storage", ["local", "s3"], indirect=True)
# The other tests on the module's server name the local parameter, so they share its one server.
LOCAL = pytest.mark.parametrize("write_storage", ["local"], indirect=True)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from security_support import PASSWORDS

    # passwordEnv is read where the client runs: the driver, and the Python workers, which get
    # it through spark.executorEnv.
    os.environ[PASSWORD_ENV] = PASSWORDS["wendy"]
    session = make_session(master="local[2,3]",  # a failed task is retried
                           conf={f"spark.executorEnv.{PASSWORD_ENV}": PASSWORDS["wendy"]})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def write_storage(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="module")
def server(write_storage: str, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    tables = ("ns.w", "ns.ow", "ns.retry", "ns.abort", "ns.src", "ns.dst")
    warehouse = fresh_warehouse(write_storage, tmp_path_factory.mktemp("spark-write"), request)
    with serving_tables(warehouse, tables) as proc:
        yield proc


def _write(df: Any, server: ServerProcess, table: str, mode: str = "append") -> None:
    df.write.format("icefloe").option("uri", server.location).option("table", table).mode(mode).save()


def _xs(server: ServerProcess, table: str) -> list[int]:
    return sorted(sql(server.location, f"SELECT x FROM {table}").column("x").to_pylist())


def _commits(server: ServerProcess, table: str) -> int:
    namespace, _, name = table.partition(".")
    return int(sql(server.location, f'SELECT count(*) AS n FROM {namespace}."{name}$snapshots"').column("n")[0].as_py())


def _frame(spark: Any, start: int, n: int, parts: int = 4) -> Any:
    return spark.range(start, start + n, numPartitions=parts).selectExpr("id AS x", "concat('v', id) AS s")


@ON_BOTH_STORAGES
def test_append_is_one_commit_and_overwrite_replaces(spark: Any, server: ServerProcess) -> None:
    _write(_frame(spark, 0, 1000), server, "ns.w")
    assert _xs(server, "ns.w") == list(range(1000))
    assert _commits(server, "ns.w") == 1, "four tasks, one snapshot"
    _write(_frame(spark, 5000, 10, parts=2), server, "ns.w", mode="overwrite")
    assert _xs(server, "ns.w") == list(range(5000, 5010))
    _write(_frame(spark, 0, 0, parts=1), server, "ns.w")
    assert _commits(server, "ns.w") == 2, "the overwrite is one snapshot; an empty append commits nothing"
    operation = sql(server.location, 'SELECT operation FROM ns."w$snapshots" ORDER BY committed_at DESC LIMIT 1')
    assert operation.column("operation").to_pylist() == ["overwrite"]
    # Read back through the source, split: each Spark partition one endpoint's part of the files.
    _write(_frame(spark, 0, 990, parts=3), server, "ns.w")
    split = (spark.read.format("icefloe").option("uri", server.location).option("table", "ns.w")
             .option("targetPartitionBytes", "1").option("maxPartitions", "4").load())
    assert split.rdd.getNumPartitions() == 4
    assert sorted(r.x for r in split.select("x").collect()) == [*range(990), *range(5000, 5010)]


@LOCAL
def test_overwrite_under_a_concurrent_reader_is_never_empty_or_doubled(spark: Any, server: ServerProcess) -> None:
    """Three 4-task overwrites while a Flight SQL reader counts: each read is one whole generation."""
    import threading

    _write(_frame(spark, 0, 400), server, "ns.ow")
    stop = threading.Event()
    reads: list[list[int]] = []

    def read() -> None:
        while not stop.is_set():
            xs = _xs(server, "ns.ow")
            reads.append(sorted({x // 10_000 for x in xs}) + [len(xs)])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for generation in range(1, 4):
            _write(_frame(spark, 10_000 * generation, 400), server, "ns.ow", mode="overwrite")
    finally:
        stop.set()
        reader.join(60)
    assert _xs(server, "ns.ow") == list(range(30_000, 30_400))
    assert len(reads) >= 3, "the reader must have raced the writes"
    bad = [r for r in reads if len(r) != 2 or r[-1] != 400]
    assert not bad, f"a reader saw an empty, doubled or mixed table: {bad[:3]}"
    assert _commits(server, "ns.ow") == 4, "one snapshot per job"
    # The empty DataFrame's overwrite empties the table, still in one commit.
    _write(_frame(spark, 0, 0, parts=1), server, "ns.ow", mode="overwrite")
    assert _xs(server, "ns.ow") == [] and _commits(server, "ns.ow") == 5


def _fail_first_attempt_midway(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    for n, batch in enumerate(batches):
        if n == 1 and context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("killed on its first attempt")
        yield batch


@ON_BOTH_STORAGES
def test_a_task_that_fails_and_is_retried_writes_no_duplicates(spark: Any, server: ServerProcess) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = _frame(spark, 0, 2000).mapInArrow(_fail_first_attempt_midway, "x long, s string")
        _write(df, server, "ns.retry")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert _xs(server, "ns.retry") == list(range(2000))
    assert _commits(server, "ns.retry") == 1


def _always_fail_partition_one(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    for batch in batches:
        if context is not None and context.partitionId() == 1:
            raise RuntimeError("this partition always fails")
        yield batch


@ON_BOTH_STORAGES
def test_an_aborted_job_leaves_nothing_visible(spark: Any, server: ServerProcess) -> None:
    do_put(server.location, "ns.abort", pa.table({"x": pa.array([-1], pa.int64()), "s": ["before"]}))
    df = _frame(spark, 0, 400, parts=2).mapInArrow(_always_fail_partition_one, "x long, s string")
    with pytest.raises(Exception, match="always fails"):
        _write(df, server, "ns.abort")
    assert _xs(server, "ns.abort") == [-1]
    assert _commits(server, "ns.abort") == 1


@LOCAL
def test_stream_sink_replayed_batch_is_a_duplicate(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    first = do_put(server.location, "ns.src", pa.table({"x": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    checkpoint = tmp_path / "cp"

    def run(until_rows: int) -> None:
        query = (spark.readStream.format("icefloe").option("uri", server.location).option("table", "ns.src")
                 .option("startingOffsets", str(first["commit_seq"] - 1)).load()
                 .writeStream.format("icefloe").option("uri", server.location).option("table", "ns.dst")
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + 90
            while len(_xs(server, "ns.dst")) < until_rows or query.lastProgress is None:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, query.status
                time.sleep(0.3)
            time.sleep(1.0)
        finally:
            query.stop()
            stopped = time.monotonic() + 60
            while spark.streams.active and time.monotonic() < stopped:
                time.sleep(0.2)  # the next run may use the checkpoint only once this one let go

    run(2)
    do_put(server.location, "ns.src", pa.table({"x": pa.array([3], pa.int64()), "s": ["c"]}))
    run(3)
    assert _xs(server, "ns.dst") == [1, 2, 3]
    # A crash after the sink committed but before Spark recorded the batch: Spark replays it.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    commits_before = _commits(server, "ns.dst")
    run(3)
    assert (checkpoint / "commits" / str(last)).exists(), "Spark ran the batch again"
    assert _xs(server, "ns.dst") == [1, 2, 3], "the replayed batch was answered as a duplicate"
    assert _commits(server, "ns.dst") == commits_before


def _tls_auth_server(tmp_path: Path, extra: tuple[str, ...] = ()) -> tuple[ServerProcess, Any]:
    """A server with users and TLS (certificates made here), over a new warehouse with ns.sec."""
    from security_support import make_pki, write_users_file

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    users = write_users_file(tmp_path / "users.toml")
    make_tables(tmp_path / "warehouse", ("ns.sec",), XS_SCHEMA)
    proc = ServerProcess(tmp_path / "warehouse", ["--users", str(users), "--tls-cert", str(pki.server_cert),
                                                  "--tls-key", str(pki.server_key), *extra])
    return proc.start(), pki


def test_tls_login_token_file_and_no_secret_in_plans(spark: Any, tmp_path: Path) -> None:
    """Write with user + passwordEnv (read on the driver and in the Python workers) over verified
    TLS, read back with tokenFile and with a literal token: the secrets are nowhere in the plans."""
    import pyarrow.flight as flight
    from security_support import PASSWORDS

    proc, pki = _tls_auth_server(tmp_path)
    try:
        assert proc.location.startswith("grpc+tls://")
        secure = {"uri": proc.location, "table": "ns.sec", "tls.rootCerts": str(pki.ca_cert)}
        writer = _frame(spark, 0, 300, parts=3).write.format("icefloe").options(**secure)
        writer.option("user", "wendy").option("passwordEnv", PASSWORD_ENV).mode("append").save()
        client = flight.FlightClient(proc.location, tls_root_certs=pki.ca_cert.read_bytes())
        try:
            header = client.authenticate_basic_token("rita", PASSWORDS["rita"])
        finally:
            client.close()
        token = header[1].decode().removeprefix("Bearer ")
        (tmp_path / "token").write_text(token + "\n")
        by_file = spark.read.format("icefloe").options(**secure).option("tokenFile", str(tmp_path / "token")).load()
        assert sorted(r.x for r in by_file.collect()) == list(range(300))
        literal = spark.read.format("icefloe").options(**secure).option("token", token).load()
        assert literal.count() == 300
        for frame in (by_file, literal, literal.where("x > 5")):
            execution = frame._jdf.queryExecution()
            plans = execution.toString() + "".join(  # what df.explain(mode) prints
                spark._jvm.PythonSQLUtils.explainString(execution, mode) for mode in ("extended", "formatted"))
            assert "ns.sec" in plans or "icefloe" in plans.lower(), plans[:500]
            assert token not in plans and PASSWORDS["wendy"] not in plans, "a secret in a Spark plan"
        # Without credentials, or with a wrong root certificate, the read fails with the server's reason.
        with pytest.raises(Exception, match="(?i)unauthenticated|credentials"):
            spark.read.format("icefloe").options(**secure).load().collect()
        wrong = {**secure, "tls.rootCerts": str(pki.client_cert)}
        with pytest.raises(Exception, match="(?i)unavailable|handshake|certificate|ssl"):
            spark.read.format("icefloe").options(**wrong).option("tokenFile", str(tmp_path / "token")).option(
                "retries", "0").load().collect()
    finally:
        proc.stop()
    assert token not in proc.log and PASSWORDS["wendy"] not in proc.log


def test_retries_ride_out_a_server_restart(spark: Any, tmp_path: Path) -> None:
    """The server is down when the read starts and comes back on the same port: UNAVAILABLE is
    retried with backoff, so the read succeeds."""
    import socket
    import threading

    make_tables(tmp_path / "warehouse", ("ns.rt",), XS_SCHEMA)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = ServerProcess(tmp_path / "warehouse", ["--port", str(port)]).start()
    try:
        do_put(proc.location, "ns.rt", pa.table({"x": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]}))
        proc.stop()
        back = threading.Timer(2.0, proc.start)
        back.start()
        frame = spark.read.format("icefloe").option("uri", proc.location).option("table", "ns.rt").option(
            "retries", "8").load()
        assert sorted(r.x for r in frame.collect()) == [1, 2, 3]
        back.join()
    finally:
        proc.stop()


def _pass_through(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def test_kill_9_of_a_streaming_write_job_mid_batch(spark: Any, tmp_path: Path) -> None:
    """A real crash: the job's whole process group (driver, JVM, Python workers) is killed with
    SIGKILL while one task of a micro-batch has staged its rows and another is still running.
    Nothing of that batch is visible; the same query restarted from its checkpoint (here, in
    this session) commits the batch once, and the next one once."""
    import signal
    import subprocess

    make_tables(tmp_path / "warehouse", ("ns.src", "ns.dst"), XS_SCHEMA)
    proc = ServerProcess(tmp_path / "warehouse").start()
    checkpoint, marker = tmp_path / "cp", tmp_path / "held"
    job = [sys.executable, str(Path(__file__).with_name("stream_job.py")), proc.location, str(checkpoint),
           str(marker)]
    tests = str(Path(__file__).parents[1])  # doput_client, for spark_support
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    try:
        first = pa.table({"x": pa.array(range(20), pa.int64()), "s": [f"a{i}" for i in range(20)]})
        do_put(proc.location, "ns.src", first)
        crashed = subprocess.Popen([*job, "40"], env=env, start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 180
            while not marker.exists():
                assert crashed.poll() is None, "the job ended before the batch was held"
                assert time.monotonic() < deadline, "the second task never started"
                time.sleep(0.2)
            time.sleep(2.0)  # the first task's DoPut stages its rows meanwhile
        finally:
            os.killpg(crashed.pid, signal.SIGKILL)
            crashed.wait(30)
        assert _xs(proc, "ns.dst") == [] and _commits(proc, "ns.dst") == 0, "nothing of the batch is visible"
        assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()
        second = pa.table({"x": pa.array(range(100, 120), pa.int64()), "s": [f"b{i}" for i in range(20)]})
        do_put(proc.location, "ns.src", second)
        source = (spark.readStream.format("icefloe").option("uri", proc.location).option("table", "ns.src")
                  .option("startingOffsets", "earliest").load())
        query = (source.repartition(2, "x").mapInArrow(_pass_through, "x long, s string")  # the job's plan
                 .writeStream.format("icefloe").option("uri", proc.location).option("table", "ns.dst")
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + 120
            while len(_xs(proc, "ns.dst")) < 40:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, query.status
                time.sleep(0.3)
            time.sleep(2.0)  # a second commit of a batch would land now
        finally:
            query.stop()
        assert _xs(proc, "ns.dst") == list(range(20)) + list(range(100, 120)), "every row once"
        assert _commits(proc, "ns.dst") == 2, "the replayed batch and the next: one commit each"
    finally:
        proc.stop()
