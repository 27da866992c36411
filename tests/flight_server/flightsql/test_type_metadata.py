"""Type metadata a SQL tool reads (issue 39 item 10): GetXdbcTypeInfo and column type names.

Note: the stock Flight SQL JDBC driver (18.3) does not call GetXdbcTypeInfo for
``DatabaseMetaData.getTypeInfo()`` (it inherits Avatica's empty answer), so the command is
checked here with pyarrow.flight, as ADBC and ODBC drivers send it.
"""

from __future__ import annotations

from collections.abc import Iterator

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_wire import any_of, field_varint, statement_query
from servers import ServerProcess

# FlightSql.proto, CommandGetXdbcTypeInfo: the result schema, nullability included.
SPEC_SCHEMA = pa.schema([
    pa.field("type_name", pa.utf8(), False),
    pa.field("data_type", pa.int32(), False),
    pa.field("column_size", pa.int32()),
    pa.field("literal_prefix", pa.utf8()),
    pa.field("literal_suffix", pa.utf8()),
    pa.field("create_params", pa.list_(pa.field("item", pa.utf8(), False))),
    pa.field("nullable", pa.int32(), False),
    pa.field("case_sensitive", pa.bool_(), False),
    pa.field("searchable", pa.int32(), False),
    pa.field("unsigned_attribute", pa.bool_()),
    pa.field("fixed_prec_scale", pa.bool_(), False),
    pa.field("auto_increment", pa.bool_()),
    pa.field("local_type_name", pa.utf8()),
    pa.field("minimum_scale", pa.int32()),
    pa.field("maximum_scale", pa.int32()),
    pa.field("sql_data_type", pa.int32(), False),
    pa.field("datetime_subcode", pa.int32()),
    pa.field("num_prec_radix", pa.int32()),
    pa.field("interval_precision", pa.int32()),
])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("typemeta") / "warehouse").start()
    try:
        yield proc
    finally:
        proc.stop()


def _fetch(location: str, cmd: bytes) -> tuple[pa.Schema, pa.Table]:
    client = flight.connect(location)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(cmd))
        table = client.do_get(info.endpoints[0].ticket).read_all()
        return info.schema, table
    finally:
        client.close()


def test_xdbc_type_info_lists_the_types_with_the_spec_schema(live: ServerProcess) -> None:
    schema, table = _fetch(live.location, any_of("CommandGetXdbcTypeInfo"))
    assert schema == SPEC_SCHEMA and table.schema == SPEC_SCHEMA
    names = table.column("type_name").to_pylist()
    for name in ("BIGINT", "INTEGER", "DOUBLE", "DECIMAL", "VARCHAR", "BLOB", "BOOLEAN", "DATE", "TIME",
                 "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "UUID", "LIST", "MAP", "STRUCT"):
        assert name in names
    _, timestamps = _fetch(live.location, any_of("CommandGetXdbcTypeInfo", field_varint(1, 93)))
    assert timestamps.column("type_name").to_pylist() == ["TIMESTAMP", "TIMESTAMP WITH TIME ZONE"]


def test_nested_type_names_have_no_field_ids_and_keep_case(live: ServerProcess) -> None:
    with fsql.connect(live.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute('CREATE TABLE nest (s STRUCT("CityId" INTEGER, "Tags" VARCHAR[]), '
                    "m MAP(VARCHAR, STRUCT(Zed DOUBLE)))")
        table_schema = conn.adbc_get_table_schema("nest", db_schema_filter="default")
    expected = {"s": "STRUCT(CityId INTEGER, Tags VARCHAR[])", "m": "MAP(VARCHAR, STRUCT(Zed DOUBLE))"}
    for name, type_name in expected.items():
        assert table_schema.field(name).metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"].decode() == type_name
    schema, _ = _fetch(live.location, statement_query("SELECT s, m FROM nest"))
    for name, type_name in expected.items():
        assert schema.field(name).metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"].decode() == type_name
