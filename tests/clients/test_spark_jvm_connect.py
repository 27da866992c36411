"""The JVM connector under Spark Connect (remote("local[2]")): the jar is on the Connect server's
side (spark.jars at server start); the client only names the format."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from servers import ServerProcess, make_tables, serving
from spark_jvm_support import FORMAT, connector_jar, missing_tools

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

SCHEMA = pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from spark_support import do_put

    warehouse: Path = tmp_path_factory.mktemp("spark-jvm-connect") / "warehouse"
    make_tables(warehouse, ("ns.src", "ns.dst"), SCHEMA)
    with serving(warehouse) as proc:
        do_put(proc.location, "ns.src", pa.table({"x": pa.array(range(100), pa.int64()),
                                                   "s": [f"r{i}" for i in range(100)]}, schema=SCHEMA))
        yield proc


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from spark_support import make_session

    session = make_session(remote=True, conf={"spark.jars": connector_jar()})
    yield session
    session.stop()


def test_read_with_pushdown_and_write_once_over_spark_connect(spark: Any, server: ServerProcess) -> None:
    from spark_support import sql

    frame = spark.read.format(FORMAT).option("uri", server.location).option("table", "ns.src").load()
    assert sorted(r.x for r in frame.where("x >= 90").collect()) == list(range(90, 100))
    frame.where("x < 10").write.format(FORMAT).option("uri", server.location).option("table", "ns.dst").mode(
        "append").save()
    assert sorted(sql(server.location, "SELECT x FROM ns.dst").column("x").to_pylist()) == list(range(10))
    snapshots = sql(server.location, 'SELECT count(*) AS n FROM ns."dst$snapshots"').column("n")[0].as_py()
    assert snapshots == 1
