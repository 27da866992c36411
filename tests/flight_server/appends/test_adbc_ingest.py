"""ADBC ``adbc_ingest`` (Flight SQL CommandStatementIngest) in every mode, through a real server,
the four modes and their failures over a local warehouse and an S3 one (``ON_EVERY_STORAGE``:
what lands, what a failed ingest leaves behind); the rest, which no storage changes, locally."""

from __future__ import annotations

from collections.abc import Iterator

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pytest
from append_helpers import do_put, read_only, rows
from servers import ServerProcess
from storage_kinds import ON_EVERY_STORAGE, Warehouse, start_server, table_files

HEADER_OPTION = "adbc.flight.sql.rpc.call_header.x-icefloe-idempotency-key"


@pytest.fixture
def server(warehouse: Warehouse) -> Iterator[ServerProcess]:
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


@pytest.fixture
def conn(server: ServerProcess) -> Iterator[flight_sql.Connection]:
    connection = flight_sql.connect(server.location, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


def _scan(warehouse: Warehouse, name: str) -> pa.Table:
    cat = read_only(warehouse)
    try:
        return cat.load_table(name).scan().to_arrow()
    finally:
        cat.close()


def _ops(warehouse: Warehouse, name: str) -> list[str]:
    cat = read_only(warehouse)
    try:
        return [r.operation for r in cat.log.read(0) if r.qualified_name == name]
    finally:
        cat.close()


@ON_EVERY_STORAGE
def test_create_creates_namespace_and_table(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        assert cur.adbc_ingest("events", rows(100), mode="create", db_schema_name="fresh") == 100
        data = _scan(warehouse, "fresh.events")
        assert sorted(data.column("id").to_pylist()) == list(range(100))
        with pytest.raises(Exception, match="already exists"):
            cur.adbc_ingest("events", rows(1), mode="create", db_schema_name="fresh")
    assert _ops(warehouse, "fresh.events") == ["create"]  # the table and its rows: one commit
    cat = read_only(warehouse)
    try:
        record = cat.log.get(cat.log.head())
        assert record is not None and (record.added_rows, record.added_files) == (100, 1)
        assert record.snapshot_id == cat.load_table("fresh.events").metadata.current_snapshot_id
    finally:
        cat.close()


@ON_EVERY_STORAGE
def test_append_requires_table_and_appends(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        with pytest.raises(Exception, match="does not exist"):
            cur.adbc_ingest("nope", rows(1), mode="append", db_schema_name="ns")
        cur.adbc_ingest("t", rows(10), mode="create", db_schema_name="ns")
        assert cur.adbc_ingest("t", rows(5, start=10), mode="append", db_schema_name="ns") == 5
    assert sorted(_scan(warehouse, "ns.t").column("id").to_pylist()) == list(range(15))


@ON_EVERY_STORAGE
def test_create_append_creates_once_then_appends(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        assert cur.adbc_ingest("ca", rows(3), mode="create_append", db_schema_name="ns2") == 3
        assert cur.adbc_ingest("ca", rows(4, start=3), mode="create_append", db_schema_name="ns2") == 4
    assert sorted(_scan(warehouse, "ns2.ca").column("id").to_pylist()) == list(range(7))


@ON_EVERY_STORAGE
def test_replace_takes_new_rows_and_schema(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        cur.adbc_ingest("r", rows(50), mode="create", db_schema_name="ns")
        other = pa.table({"k": pa.array(["a", "b"]), "n": pa.array([1.5, 2.5])})
        assert cur.adbc_ingest("r", other, mode="replace", db_schema_name="ns") == 2
        # replace of a missing table creates it
        assert cur.adbc_ingest("r2", rows(2), mode="replace", db_schema_name="ns") == 2
    data = _scan(warehouse, "ns.r")
    assert data.column_names == ["k", "n"] and data.num_rows == 2
    # one commit each: readers never see ns.r missing or empty in between
    assert _ops(warehouse, "ns.r") == ["create", "replace"]
    assert _ops(warehouse, "ns.r2") == ["create"]


def test_temporary_refused_clearly(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur, pytest.raises(Exception, match="temporary tables are not supported"):
        cur.adbc_ingest("tmp", rows(1), mode="create", db_schema_name="ns", temporary=True)
    cat = read_only(warehouse)
    try:
        assert not cat.table_exists("ns.tmp")
    finally:
        cat.close()


def test_schema_mismatch_refused_and_nothing_committed(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        cur.adbc_ingest("s", rows(2), mode="create", db_schema_name="ns")
        with pytest.raises(Exception, match="'id'"):
            cur.adbc_ingest("s", pa.table({"id": ["x"], "v": ["y"]}), mode="append", db_schema_name="ns")
    assert _ops(warehouse, "ns.s") == ["create"]


def test_ingest_with_idempotency_header_commits_once(server: ServerProcess, warehouse: Warehouse) -> None:
    conn = flight_sql.connect(server.location, db_kwargs={HEADER_OPTION: "ingest-7"}, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest("k", rows(20), mode="create_append", db_schema_name="ns")
            assert cur.adbc_ingest("k", rows(20), mode="create_append", db_schema_name="ns") == 20
    finally:
        conn.close()
    assert _scan(warehouse, "ns.k").num_rows == 20
    assert _ops(warehouse, "ns.k") == ["create"]
    # the same key through DoPut on the same table is the same logical write
    assert do_put(server.location, ("ns", "k"), rows(20), key="ingest-7")["duplicate"] is True


def test_ingest_and_doput_land_in_the_same_table(conn: flight_sql.Connection, server: ServerProcess) -> None:
    with conn.cursor() as cur:
        cur.adbc_ingest("mix", rows(10), mode="create", db_schema_name="ns")
    result = do_put(server.location, ("ns", "mix"), rows(5, start=10))
    assert result["rows"] == 5
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n, max(id) AS m FROM ns.mix")
        assert cur.fetchone() == (15, 14)


def _failing_reader(after_batches: int) -> pa.RecordBatchReader:
    schema = rows(1).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(after_batches):
            yield rows(1000, start=i * 1000).to_batches()[0]
        raise RuntimeError("the producer failed midway")

    return pa.RecordBatchReader.from_batches(schema, batches())


def test_failed_replace_keeps_the_old_table(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur:
        cur.adbc_ingest("keep", rows(30), mode="create", db_schema_name="ns")
        dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
        with pytest.raises(Exception, match="'a'"):
            cur.adbc_ingest("keep", dup, mode="replace", db_schema_name="ns")
        with pytest.raises(Exception):  # noqa: B017 - the driver's own error type for a failed producer
            cur.adbc_ingest("keep", _failing_reader(3), mode="replace", db_schema_name="ns")
    assert sorted(_scan(warehouse, "ns.keep").column("id").to_pylist()) == list(range(30))
    assert _ops(warehouse, "ns.keep") == ["create"]


@ON_EVERY_STORAGE
def test_failed_create_creates_nothing(conn: flight_sql.Connection, warehouse: Warehouse) -> None:
    with conn.cursor() as cur, pytest.raises(Exception):  # noqa: B017
        cur.adbc_ingest("never", _failing_reader(3), mode="create", db_schema_name="ns")
    cat = read_only(warehouse)
    try:
        assert not cat.table_exists("ns.never")
    finally:
        cat.close()
    assert table_files(warehouse, "ns.never", "*.parquet") == [], "no data file of the failed create is left"


def test_ingest_evolves_only_when_the_call_header_asks(conn: flight_sql.Connection, server: ServerProcess,
                                                      warehouse: Warehouse) -> None:
    """ADBC sends the per-append schema policy as a call header (a connection or statement option)."""
    with conn.cursor() as cur:
        cur.adbc_ingest("pol", rows(2), mode="create", db_schema_name="ns")
        wider = rows(2, start=2).append_column("extra", pa.array(["x", "y"]))
        with pytest.raises(Exception, match="column 'extra' is not in the table") as refused:
            cur.adbc_ingest("pol", wider, mode="append", db_schema_name="ns")
        assert "x-icefloe-schema-policy: evolve" in str(refused.value)
        cur.adbc_statement.set_options(**{"adbc.flight.sql.rpc.call_header.x-icefloe-schema-policy": "evolve"})
        assert cur.adbc_ingest("pol", wider, mode="append", db_schema_name="ns") == 2
    got = _scan(warehouse, "ns.pol")
    assert got.num_rows == 4 and sorted(v for v in got.column("extra").to_pylist() if v) == ["x", "y"]
