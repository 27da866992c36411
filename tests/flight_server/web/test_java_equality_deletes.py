"""Equality delete files written by Iceberg's own Java library (``GenericFileWriterFactory``'s
equality delete writer, committed as a ``RowDelta`` through icefloe's REST catalog by the small
helper tests/java/IcebergEqualityDeletes.java), read by icefloe on every read path: Flight SQL
(whole and split scans), time travel, a change scan, the embedded API. Single key, composite key,
a key with NULLs, and a key column renamed after the delete was written (matched by field id).

The helper is compiled once against the Iceberg Spark runtime jar (scripts/fetch-iceberg-spark)
and Hadoop's client jars that pyspark ships, into ~/.cache/icefloe/iceberg-java-helper/."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import icefloe
from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url, sql
from tests.servers import ServerProcess

SOURCE = Path(__file__).resolve().parents[2] / "java" / "IcebergEqualityDeletes.java"
RUNTIME = Path.home() / ".cache" / "icefloe" / "iceberg-spark" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False),
                NestedField(3, "v", LongType(), required=False))
BASE = [(i, None if i % 5 == 0 else f"n{i % 4}", i * 10) for i in range(40)]


def _hadoop_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    return jars if any(jars.glob("hadoop-client-api-*.jar")) else None


def _skip_reason() -> str | None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "a JDK (java, javac) is needed to build the Iceberg Java helper"
    if not RUNTIME.exists():
        return f"Iceberg runtime jar missing: run scripts/fetch-iceberg-spark ({RUNTIME})"
    if _hadoop_jars() is None:
        return "pyspark's Hadoop client jars are needed by Iceberg's HadoopFileIO"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


@pytest.fixture(scope="module")
def classpath() -> str:
    """The helper compiled once per source version (cached), and the classpath to run it."""
    digest = hashlib.sha256(SOURCE.read_bytes() + RUNTIME.name.encode()).hexdigest()[:16]
    out = Path.home() / ".cache" / "icefloe" / "iceberg-java-helper" / digest
    jars = f"{RUNTIME}:{_hadoop_jars()}/*"
    if not (out / "IcebergEqualityDeletes.class").exists():
        building = out.with_name(out.name + ".tmp")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        subprocess.run(["javac", "-d", str(building), "-cp", jars, str(SOURCE)], check=True)
        shutil.rmtree(out, ignore_errors=True)
        building.rename(out)
    return f"{jars}:{out}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("javaeq") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> RestCatalog:
    catalog = RestCatalog("icefloe", uri=rest_url(server))
    catalog.create_namespace("jeq")
    return catalog


def _java_delete(classpath: str, server: ServerProcess, table: str, columns: str, rows: list[str]) -> None:
    subprocess.run(["java", "-cp", classpath, "IcebergEqualityDeletes", rest_url(server), table, columns, *rows],
                   check=True, capture_output=True, timeout=180)


def _new(rest: RestCatalog, name: str) -> Any:
    table = rest.create_table(f"jeq.{name}", SCHEMA)
    # Two appends: two data files, so split scans have more than one endpoint to apply deletes in.
    for half in (BASE[:20], BASE[20:]):
        table.append(pa.table({"id": pa.array([r[0] for r in half], pa.int64()),
                               "name": pa.array([r[1] for r in half], pa.string()),
                               "v": pa.array([r[2] for r in half], pa.int64())}))
    return rest.load_table(f"jeq.{name}")


def _every_read(server: ServerProcess, table: str, want: list[tuple[Any, ...]], name_column: str = "name") -> None:
    """Flight SQL, a split scan and the embedded API all see exactly ``want``."""
    query = f"SELECT id, {name_column} AS name, v FROM {table}"
    assert sorted(tuple(r.values()) for r in sql(server.location, query).to_pylist()) == sorted(want)
    client = flight.FlightClient(server.location)
    try:
        from tests.flight_server.flightsql.flightsql_wire import statement_query

        options = flight.FlightCallOptions(headers=[(b"icefloe.scan.target-partition-bytes", b"1"),
                                                    (b"icefloe.scan.max-partitions", b"8")])
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(f"SELECT id FROM {table}")),
                                      options)
        assert len(info.endpoints) > 1
        split = sorted(i for e in info.endpoints for i in client.do_get(e.ticket).read_all().column("id").to_pylist())
    finally:
        client.close()
    assert split == sorted(r[0] for r in want)
    lake = icefloe.open(str(server.warehouse), read_only=True)
    try:
        embedded = pa.table(lake.table(table).scan())
    finally:
        lake.close()
    assert sorted(embedded.column("id").to_pylist()) == sorted(r[0] for r in want)


def test_single_key_time_travel_and_changes(classpath: str, rest: RestCatalog, server: ServerProcess) -> None:
    table = _new(rest, "single")
    before_snapshot = table.current_snapshot().snapshot_id
    start = head_seq(server.warehouse)
    _java_delete(classpath, server, "jeq.single", "id", ["3", "25", "99"])
    end = head_seq(server.warehouse)
    _every_read(server, "jeq.single", [r for r in BASE if r[0] not in (3, 25)])
    old = sql(server.location, f"SELECT count(*) AS n FROM jeq.single AT (VERSION => {before_snapshot})")
    assert old.column("n")[0].as_py() == len(BASE)
    client = flight.FlightClient(server.location)
    try:
        request = {"changes": "jeq.single", "after": start, "until": end, "include": "all"}
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        rows = [r for e in info.endpoints for r in client.do_get(e.ticket).read_all().to_pylist()]
    finally:
        client.close()
    assert sorted(r["id"] for r in rows if r["_operation"] == "delete") == [3, 25]


def test_composite_key_with_nulls(classpath: str, rest: RestCatalog, server: ServerProcess) -> None:
    _new(rest, "composite")
    # (1, n1) matches; (2, zz) does not; (10, NULL) matches id 10's NULL name (NULL equals NULL).
    _java_delete(classpath, server, "jeq.composite", "id,name", ["1|n1", "2|zz", "10|\\N"])
    _every_read(server, "jeq.composite", [r for r in BASE if (r[0], r[1]) not in ((1, "n1"), (10, None))])


def test_key_column_renamed_after_the_delete(classpath: str, rest: RestCatalog, server: ServerProcess) -> None:
    _new(rest, "renamed")
    _java_delete(classpath, server, "jeq.renamed", "name", ["n2"])
    table = rest.load_table("jeq.renamed")
    with table.update_schema() as update:
        update.rename_column("name", "label")
    _every_read(server, "jeq.renamed", [r for r in BASE if r[1] != "n2"], name_column="label")
