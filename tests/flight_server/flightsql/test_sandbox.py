"""Sandbox escape suite: client SQL can neither touch files nor loosen the sandbox.

Every statement goes through a real server; each must fail with a clean error, return no
data, and leave the file system (the warehouse included) exactly as it was.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_wire import statement_query
from servers import ServerProcess

from flight_server.engine.slots import Slot as _Slot


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "catalog.rocksdb" not in p.parts
    }


def _escapes(warehouse: Path, scratch: Path) -> list[str]:
    data_file = next((warehouse / "sales" / "orders" / "data").rglob("*.parquet"))
    metadata = next((warehouse / "sales" / "orders" / "metadata").glob("*.metadata.json"))
    out = scratch / "out"
    return [
        # reading files, the warehouse's own data files first
        f"SELECT * FROM read_parquet('{data_file}')",
        f"SELECT * FROM '{data_file}'",
        f"SELECT * FROM parquet_scan('{data_file}')",
        f"SELECT * FROM parquet_metadata('{data_file}')",
        f"SELECT * FROM parquet_schema('{data_file}')",
        f"SELECT * FROM read_json('{metadata}')",
        f"SELECT * FROM read_text('{metadata}')",
        f"SELECT * FROM read_blob('{metadata}')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv_auto('/etc/hostname')",
        "SELECT * FROM sniff_csv('/etc/passwd')",
        "SELECT * FROM 'file:///etc/passwd'",
        # listing folders
        f"SELECT * FROM glob('{warehouse}/**')",
        "SELECT * FROM glob('/etc/*')",
        # writing files
        f"COPY (SELECT 1 AS x) TO '{out}.csv'",
        f"COPY (SELECT 1 AS x) TO '{data_file}' (FORMAT parquet)",
        f"EXPORT DATABASE '{out}'",
        f"IMPORT DATABASE '{warehouse}'",
        # other databases
        f"ATTACH '{out}.duckdb' AS x",
        "ATTACH ':memory:' AS x",
        "DETACH icefloe",
        "USE memory",
        # extensions
        "INSTALL httpfs",
        "FORCE INSTALL httpfs",
        "LOAD httpfs",
        "SELECT * FROM iceberg_scan('x')",
        # settings and the sandbox itself
        "SET enable_external_access = true",
        "RESET enable_external_access",
        "SET lock_configuration = false",
        "SET allowed_directories = ['/']",
        "SET python_enable_replacements = true",
        f"SET temp_directory = '{out}'",
        "PRAGMA enable_profiling",
        f"SET profiling_output = '{out}.json'",
        "CALL pragma_version()",
        "CHECKPOINT",
        "VACUUM",
        "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
        "CREATE MACRO m() AS 1",
        # (CREATE TABLE t AS SELECT 1 is a legitimate SQL write into the session schema `default`)
        "CREATE TEMP TABLE t AS SELECT 1",
        "PREPARE p AS SELECT 1",
        # server-side Python objects by name (DuckDB replacement scans)
        "SELECT * FROM reader",
        "SELECT * FROM params",
        "SELECT * FROM part",
        # two statements hiding a second one
        "SELECT 1; COPY (SELECT 1) TO '/tmp/icefloe-escape.csv'",
    ]


def test_sandbox_escapes_are_refused(sample_server: ServerProcess, tmp_path: Path) -> None:
    warehouse = sample_server.warehouse
    before = _digest(warehouse)
    client = flight.FlightClient(sample_server.location)
    for sql in _escapes(warehouse, tmp_path):
        with pytest.raises((flight.FlightError, pa.ArrowException)) as info:
            descriptor = flight.FlightDescriptor.for_command(statement_query(sql))
            flight_info = client.get_flight_info(descriptor)
            client.do_get(flight_info.endpoints[0].ticket).read_all()
        message = str(info.value)
        assert "Traceback" not in message, (sql, message)
    assert list(tmp_path.iterdir()) == []
    assert not Path("/tmp/icefloe-escape.csv").exists()
    assert _digest(warehouse) == before
    # ...and the server is still fine.
    flight_info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT 1 AS x")))
    assert client.do_get(flight_info.endpoints[0].ticket).read_all().column("x").to_pylist() == [1]
    client.close()


def test_file_access_is_permission_denied(sample_server: ServerProcess) -> None:
    client = flight.FlightClient(sample_server.location)
    with pytest.raises(flight.FlightUnauthorizedError, match="not allowed in icefloe SQL: the table function read_csv"):
        client.get_flight_info(
            flight.FlightDescriptor.for_command(statement_query("SELECT * FROM read_csv('/etc/passwd')"))
        )
    client.close()


def test_engine_database_is_locked_even_without_statement_filtering() -> None:
    """Defence in depth: the DuckDB databases themselves refuse, whatever the statement filter lets by."""
    slot = _Slot(threads=1)
    cur = slot.cursor()
    for sql in (
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY (SELECT 1) TO '/tmp/icefloe-escape2.csv'",
        "INSTALL httpfs",
    ):
        with pytest.raises(duckdb.Error):
            cur.execute(sql)
    assert not Path("/tmp/icefloe-escape2.csv").exists()


def test_duckdb_allowed_directories_alone_is_not_enough(tmp_path: Path) -> None:
    """Why icefloe allows no directory at all: DuckDB 2.0.1 lets COPY ... TO write inside one."""
    con = duckdb.connect()
    con.execute(f"SET allowed_directories = ['{tmp_path}']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    con.execute(f"COPY (SELECT 1 AS x) TO '{tmp_path / 'written.csv'}'")
    assert (tmp_path / "written.csv").exists()
    con.close()
