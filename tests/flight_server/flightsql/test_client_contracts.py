"""What stock Flight SQL clients expect: one current schema per session, column metadata on
query results, writable tables that say so. Real server, real ADBC and pyarrow clients."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_wire import any_of, field_bytes, field_varint, read_fields, statement_query
from servers import ServerProcess

COOKIES = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}


@pytest.fixture
def server(sample_server: ServerProcess) -> ServerProcess:
    """This module's sample server (its writes go to ``default`` only; ``sales`` stays as made)."""
    return sample_server


def _query(conn: Any, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def test_ingest_then_read_back_unqualified(server: ServerProcess) -> None:
    """adbc_ingest without db_schema_name and an unqualified SELECT meet in the same schema."""
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    with flight_sql.connect(server.location, autocommit=True) as conn:
        with conn.cursor() as cur:
            assert cur.adbc_ingest("ingested", data, mode="create") == 3
        assert _query(conn, "SELECT id, name FROM ingested ORDER BY id").to_pylist() == data.to_pylist()
        assert _query(conn, 'SELECT count(*) AS n FROM "default".ingested').column("n").to_pylist() == [3]
        with conn.cursor() as cur:
            cur.adbc_ingest("ingested", data, mode="append")
        assert _query(conn, "SELECT count(*) AS n FROM ingested").column("n").to_pylist() == [6]


def test_unqualified_sql_writes_land_in_the_current_schema(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE written (x BIGINT)")
        cur.execute("INSERT INTO written VALUES (7), (8)")
        cur.execute("SELECT sum(x) AS s FROM written")
        assert cur.fetch_arrow_table().column("s").to_pylist() == [15]
        cur.execute('SELECT count(*) AS n FROM "default".written')
        assert cur.fetch_arrow_table().column("n").to_pylist() == [2]
        with pytest.raises(adbc_driver_manager.Error, match="cannot be dropped"):
            cur.execute('DROP SCHEMA "default" CASCADE')


def test_current_schema_is_reported_and_can_be_changed(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True, db_kwargs=COOKIES) as conn:
        assert conn.adbc_current_catalog == "icefloe"
        assert conn.adbc_current_db_schema == "default"
        conn.adbc_current_db_schema = "sales"
        assert conn.adbc_current_db_schema == "sales"
        assert _query(conn, "SELECT count(*) AS n FROM orders").column("n").to_pylist() == [4]
        with pytest.raises(adbc_driver_manager.Error):
            conn.adbc_current_db_schema = "no_such_schema"
        assert conn.adbc_current_db_schema == "sales"


def _session_options(client: flight.FlightClient, call: flight.FlightCallOptions | None = None) -> dict[str, bytes]:
    result = next(iter(client.do_action(flight.Action("GetSessionOptions", b""), call)))
    options = {}
    for entry in read_fields(result.body.to_pybytes()).get(1, []):
        fields = read_fields(entry)  # type: ignore[arg-type]
        options[fields[1][0].decode()] = read_fields(fields[2][0])[1][0]  # type: ignore[union-attr,index,arg-type]
    return options  # type: ignore[return-value]


def test_get_session_options_names_the_default_schema(server: ServerProcess) -> None:
    client = flight.FlightClient(server.location)
    try:
        assert _session_options(client) == {"catalog": b"icefloe", "schema": b"default"}
    finally:
        client.close()


def _schema_of(server: ServerProcess, sql: str) -> tuple[pa.Schema, pa.Schema]:
    client = flight.FlightClient(server.location)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        return info.schema, client.do_get(info.endpoints[0].ticket).read_all().schema
    finally:
        client.close()


def _meta(field: pa.Field) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}


def test_result_columns_carry_flight_sql_column_metadata(server: ServerProcess) -> None:
    for sql in ("SELECT id, customer AS who, amount * 2 AS twice FROM sales.orders",
                "SELECT o.id, o.customer AS who, o.amount * 2 AS twice FROM sales.orders o WHERE o.id > 1"):
        planned, streamed = _schema_of(server, sql)
        assert planned.equals(streamed, check_metadata=True), (planned, streamed)
        ident, who, twice = planned
        for field, type_name in ((ident, "BIGINT"), (who, "VARCHAR")):
            meta = _meta(field)
            assert meta["ARROW:FLIGHT:SQL:CATALOG_NAME"] == "icefloe"
            assert meta["ARROW:FLIGHT:SQL:SCHEMA_NAME"] == "sales"
            assert meta["ARROW:FLIGHT:SQL:TABLE_NAME"] == "orders"
            assert meta["ARROW:FLIGHT:SQL:TYPE_NAME"] == type_name
            assert meta["ARROW:FLIGHT:SQL:IS_READ_ONLY"] == "0"
            assert meta["ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT"] == "0"
        assert _meta(twice) == {}


def test_star_joins_and_time_travel_metadata(server: ServerProcess) -> None:
    planned, streamed = _schema_of(server, "SELECT * FROM sales.orders a JOIN sales.evolved b ON a.id = b.a")
    assert planned.equals(streamed, check_metadata=True)
    assert [_meta(f)["ARROW:FLIGHT:SQL:TABLE_NAME"] for f in planned] == ["orders"] * 3 + ["evolved"] * 3
    # USING merges columns: rather no origin than a wrong one
    planned, _ = _schema_of(server, "SELECT * FROM sales.orders JOIN sales.orders AS o2 USING (id)")
    assert all(not f.metadata for f in planned)
    client = flight.FlightClient(server.location)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(
            statement_query("SELECT snapshot_id FROM sales.\"orders$snapshots\" ORDER BY committed_at LIMIT 1")))
        first = client.do_get(info.endpoints[0].ticket).read_all().column(0)[0].as_py()
    finally:
        client.close()
    planned, streamed = _schema_of(server, f"SELECT id FROM sales.orders AT (VERSION => {first})")
    assert planned.equals(streamed, check_metadata=True)
    assert _meta(planned.field("id"))["ARROW:FLIGHT:SQL:IS_READ_ONLY"] == "1"
    assert _meta(planned.field("id"))["ARROW:FLIGHT:SQL:TABLE_NAME"] == "orders"


def test_get_tables_schemas_use_the_keys_clients_read(server: ServerProcess) -> None:
    client = flight.FlightClient(server.location)
    try:
        cmd = any_of("CommandGetTables", field_bytes(2, b"sales") + field_bytes(3, b"orders") + field_varint(5, 1))
        info = client.get_flight_info(flight.FlightDescriptor.for_command(cmd))
        table = client.do_get(info.endpoints[0].ticket).read_all()
        schema = pa.ipc.read_schema(pa.py_buffer(table.column("table_schema")[0].as_py()))
        for field in schema:
            meta = _meta(field)
            assert meta["ARROW:FLIGHT:SQL:SCHEMA_NAME"] == "sales"
            assert meta["ARROW:FLIGHT:SQL:TABLE_NAME"] == "orders"
            assert meta["ARROW:FLIGHT:SQL:IS_READ_ONLY"] == "0", "an ordinary table is writable"
    finally:
        client.close()


def test_adbc_sees_column_metadata(server: ServerProcess, tmp_path: Path) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT customer FROM sales.orders")
        schema = cur.fetch_arrow_table().schema
    assert _meta(schema.field("customer"))["ARROW:FLIGHT:SQL:TABLE_NAME"] == "orders"


def test_several_parameter_rows_bound_to_a_query_give_one_stream(server: ServerProcess) -> None:
    """ADBC executemany / BindStream on a query: the results of every row, in row order."""
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.adbc_prepare("SELECT ? AS a, ? AS b")
        cur.adbc_statement.bind_stream(pa.RecordBatchReader.from_batches(
            pa.schema([("a", pa.int64()), ("b", pa.string())]),
            [pa.record_batch({"a": [1, 2], "b": ["x", "y"]}), pa.record_batch({"a": [3], "b": ["z"]})]))
        handle, _ = cur.adbc_statement.execute_query()
        table = pa.RecordBatchReader._import_from_c(handle.address).read_all()
        assert table.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}]
        cur.execute("SELECT customer FROM sales.orders WHERE id = ?", parameters=(2,))
        assert cur.fetch_arrow_table().column(0).to_pylist() == ["bob"]


GO_METADATA = Path(__file__).resolve().parent / "go_metadata"


def test_arrow_go_reads_the_column_metadata(server: ServerProcess, tmp_path: Path) -> None:
    """arrow-go's flightsql.ColumnMetadata (SchemaNameKey, ...) on a real Go client."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed: the arrow-go client cannot be built here")
    binary = tmp_path / "go_metadata"
    build = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_METADATA, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"})
    assert build.returncode == 0, build.stderr
    address = server.location.removeprefix("grpc://")
    run = subprocess.run([str(binary), address, "SELECT id, amount + 1 AS more FROM sales.orders",
                          "SELECT b.* FROM sales.orders a JOIN sales.evolved b ON a.id = b.a"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = set(run.stdout.splitlines())
    for kind in ("PLANNED", "STREAMED"):
        assert f"{kind} 0 id catalog=icefloe schema=sales table=orders type=BIGINT readonly=false " \
               "autoincrement=false nullable=true" in lines, run.stdout
        assert f"{kind} 0 more nullable=true" in lines, run.stdout
        assert any(line.startswith(f"{kind} 1 label catalog=icefloe schema=sales table=evolved type=VARCHAR")
                   for line in lines), run.stdout


def test_bound_values_must_match_the_parameters(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.adbc_prepare("SELECT ? AS a, ? AS b")
        cur.adbc_statement.bind_stream(pa.RecordBatchReader.from_batches(
            pa.schema([("a", pa.int64())]), [pa.record_batch({"a": [1, 2]})]))
        with pytest.raises(adbc_driver_manager.Error, match="2 parameter"):
            cur.adbc_statement.execute_query()
