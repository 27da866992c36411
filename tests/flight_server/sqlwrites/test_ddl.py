"""DDL over ADBC against a real server; pyiceberg (read-only, in this process) checks the catalog."""

from __future__ import annotations

from typing import Any

import adbc_driver_manager
import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from sqlwrites_lib import log_head, log_records, rows, scalar, sql, update


def test_create_schema_if_not_exists_and_drop(conn: Any, reader_catalog: Any) -> None:
    assert update(conn, "CREATE SCHEMA ddl_a") == 0
    assert reader_catalog.namespace_exists("ddl_a")
    update(conn, "CREATE SCHEMA IF NOT EXISTS ddl_a")
    with pytest.raises(adbc_driver_manager.Error, match="schema ddl_a already exists"):
        update(conn, "CREATE SCHEMA ddl_a")
    update(conn, "DROP SCHEMA ddl_a")
    assert not reader_catalog.namespace_exists("ddl_a")
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND.*ddl_a does not exist"):
        update(conn, "DROP SCHEMA ddl_a")
    update(conn, "DROP SCHEMA IF EXISTS ddl_a")


def test_drop_schema_refused_while_not_empty_unless_cascade(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_b")
    update(conn, "CREATE TABLE ddl_b.t (a INT)")
    with pytest.raises(adbc_driver_manager.Error, match="ddl_b is not empty"):
        update(conn, "DROP SCHEMA ddl_b")
    assert reader_catalog.table_exists("ddl_b.t")
    update(conn, "DROP SCHEMA ddl_b CASCADE")
    assert not reader_catalog.namespace_exists("ddl_b")


def test_create_table_maps_duckdb_types_to_iceberg(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_c")
    update(conn, """CREATE TABLE ddl_c.typed (
        i TINYINT, s SMALLINT, n INTEGER NOT NULL, b BIGINT, f REAL, d DOUBLE, dec DECIMAL(12, 3),
        v VARCHAR, ok BOOLEAN, day DATE, t TIME, ts TIMESTAMP, tz TIMESTAMPTZ, u UUID, bin BLOB,
        xs INTEGER[], st STRUCT(x BIGINT, y VARCHAR), m MAP(VARCHAR, DOUBLE))""")
    schema = reader_catalog.load_table("ddl_c.typed").schema()
    got = {f.name: (f.field_type, f.required) for f in schema.fields}
    assert got["i"] == (IntegerType(), False) and got["s"][0] == IntegerType()
    assert got["n"] == (IntegerType(), True)
    assert got["b"][0] == LongType() and got["f"][0] == FloatType() and got["d"][0] == DoubleType()
    assert got["dec"][0] == DecimalType(12, 3)
    assert got["v"][0] == StringType() and got["ok"][0] == BooleanType() and got["day"][0] == DateType()
    assert got["t"][0] == TimeType() and got["ts"][0] == TimestampType() and got["tz"][0] == TimestamptzType()
    assert got["u"][0] == UUIDType() and got["bin"][0] == BinaryType()
    assert isinstance(got["xs"][0], ListType) and got["xs"][0].element_type == IntegerType()
    assert isinstance(got["st"][0], StructType)
    assert [(f.name, f.field_type) for f in got["st"][0].fields] == [("x", LongType()), ("y", StringType())]
    assert isinstance(got["m"][0], MapType)
    assert (got["m"][0].key_type, got["m"][0].value_type) == (StringType(), DoubleType())
    # The table is queryable (empty) right away, with those columns.
    assert sql(conn, "SELECT * FROM ddl_c.typed").column_names == list(got)


def test_create_table_if_not_exists_and_errors(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_d")
    update(conn, "CREATE TABLE ddl_d.t (a INT)")
    head = log_head(reader_catalog)
    update(conn, "CREATE TABLE IF NOT EXISTS ddl_d.t (b VARCHAR)")
    with pytest.raises(adbc_driver_manager.Error, match="table ddl_d.t already exists"):
        update(conn, "CREATE TABLE ddl_d.t (b VARCHAR)")
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND.*schema nope does not exist"):
        update(conn, "CREATE TABLE nope.t (a INT)")
    with pytest.raises(adbc_driver_manager.Error, match="INVALID_ARGUMENT.*no Iceberg equivalent"):
        update(conn, "CREATE TABLE ddl_d.bad (a INTERVAL)")
    with pytest.raises(adbc_driver_manager.Error, match="INVALID_ARGUMENT"):
        update(conn, "CREATE TABLE ddl_d.bad (a NOSUCHTYPE)")
    assert log_head(reader_catalog) == head
    assert [f.name for f in reader_catalog.load_table("ddl_d.t").schema().fields] == ["a"]


def test_ctas_is_one_commit_with_rows(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_e")
    head = log_head(reader_catalog)
    assert update(conn, "CREATE TABLE ddl_e.t AS SELECT range AS id, 'r' || range AS label FROM range(5)") == 5
    assert log_head(reader_catalog) == head + 1
    record = log_records(reader_catalog, head)[0]
    assert record.operation == "create" and record.snapshot_id is not None
    assert record.extra["sql"].startswith("CREATE TABLE ddl_e.t AS")
    table = reader_catalog.load_table("ddl_e.t")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert rows(conn, "SELECT label FROM ddl_e.t WHERE id = 3") == [{"label": "r3"}]
    # CTAS from another table records it as a lineage input.
    update(conn, "CREATE TABLE ddl_e.copy AS SELECT id FROM ddl_e.t WHERE id < 2")
    last = log_records(reader_catalog, log_head(reader_catalog) - 1)[0]
    assert last.extra["inputs"] == ["ddl_e.t"]
    assert scalar(conn, "SELECT count(*) FROM ddl_e.copy") == 2


def test_drop_table(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_f")
    update(conn, "CREATE TABLE ddl_f.t (a INT)")
    update(conn, "DROP TABLE ddl_f.t")
    assert not reader_catalog.table_exists("ddl_f.t")
    with pytest.raises(adbc_driver_manager.Error, match="NOT_FOUND.*ddl_f.t does not exist"):
        update(conn, "DROP TABLE ddl_f.t")
    update(conn, "DROP TABLE IF EXISTS ddl_f.t")


def test_alter_table_columns_rename_and_properties(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_g")
    update(conn, "CREATE TABLE ddl_g.t (a INT, b VARCHAR)")
    update(conn, "INSERT INTO ddl_g.t VALUES (1, 'x')")
    update(conn, "ALTER TABLE ddl_g.t ADD COLUMN c DECIMAL(5, 1)")
    update(conn, "INSERT INTO ddl_g.t VALUES (2, 'y', 2.5)")
    update(conn, "ALTER TABLE ddl_g.t RENAME COLUMN b TO label")
    update(conn, "ALTER TABLE ddl_g.t DROP COLUMN a")
    assert [f.name for f in reader_catalog.load_table("ddl_g.t").schema().fields] == ["label", "c"]
    assert rows(conn, "SELECT label, CAST(c AS DOUBLE) AS c FROM ddl_g.t ORDER BY label") == [
        {"label": "x", "c": None}, {"label": "y", "c": 2.5}]
    update(conn, "ALTER TABLE ddl_g.t RENAME TO renamed")
    assert reader_catalog.table_exists("ddl_g.renamed") and not reader_catalog.table_exists("ddl_g.t")
    assert scalar(conn, "SELECT count(*) FROM ddl_g.renamed") == 2
    update(conn, "ALTER TABLE ddl_g.renamed SET ('icefloe.snapshots.retain' = '50', 'owner' = 'me')")
    props = reader_catalog.load_table("ddl_g.renamed").properties
    assert props["icefloe.snapshots.retain"] == "50" and props["owner"] == "me"
    head = log_head(reader_catalog)
    for bad, pattern in [
        ("ALTER TABLE ddl_g.renamed ADD COLUMN c INT", "ALREADY_EXISTS|already exists"),
        ("ALTER TABLE ddl_g.renamed DROP COLUMN nope", "column nope does not exist"),
        ("ALTER TABLE ddl_g.renamed RENAME COLUMN nope TO x", "column nope does not exist"),
        ("ALTER TABLE ddl_g.renamed ADD COLUMN r INT NOT NULL", "NOT NULL column cannot be added"),
        ("ALTER TABLE ddl_g.nope ADD COLUMN z INT", "NOT_FOUND.*ddl_g.nope does not exist"),
    ]:
        with pytest.raises(adbc_driver_manager.Error, match=pattern):
            update(conn, bad)
    assert log_head(reader_catalog) == head


def test_commit_records_carry_sql_and_operation(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_h")
    start = log_head(reader_catalog)
    update(conn, "CREATE TABLE ddl_h.t (a INT)")
    update(conn, "ALTER TABLE ddl_h.t ADD COLUMN b INT")
    update(conn, "DROP TABLE ddl_h.t")
    records = log_records(reader_catalog, start)
    assert [r.operation for r in records] == ["create", "schema", "drop"]
    assert [r.extra["sql"] for r in records] == [
        "CREATE TABLE ddl_h.t (a INT)", "ALTER TABLE ddl_h.t ADD COLUMN b INT", "DROP TABLE ddl_h.t"]


def test_constraints_other_than_not_null_are_refused(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_i")
    head = log_head(reader_catalog)
    for bad in ("CREATE TABLE ddl_i.t (a INT DEFAULT 3)", "CREATE TABLE ddl_i.t (a INT CHECK (a > 0))",
                "CREATE TABLE ddl_i.t (a INT PRIMARY KEY)"):
        with pytest.raises(adbc_driver_manager.Error, match="only NOT NULL is supported"):
            update(conn, bad)
    assert log_head(reader_catalog) == head and not reader_catalog.table_exists("ddl_i.t")
    update(conn, "CREATE TABLE ddl_i.t (a INT NULL, b INT NOT NULL)")
    assert [f.required for f in reader_catalog.load_table("ddl_i.t").schema().fields] == [False, True]


def test_sql_info_announces_schema_and_table_ddl(write_server: Any) -> None:
    import pyarrow.flight as flight

    from flight_server.flightsql import protocol

    client = flight.FlightClient(write_server.location)
    try:
        command = protocol.CommandGetSqlInfo(info=[3, 500, 501, 502]).pack()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
        table = client.do_get(info.endpoints[0].ticket).read_all()
    finally:
        client.close()
    values = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
    assert values == {3: False, 500: False, 501: True, 502: True}  # not read-only; schema and table DDL


def test_alter_column_type_promotion_and_drop_not_null(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA ddl_j")
    update(conn, "CREATE TABLE ddl_j.t (a INT NOT NULL, f REAL, d DECIMAL(6, 2), s VARCHAR)")
    update(conn, "INSERT INTO ddl_j.t VALUES (1, 1.5, 12.25, 'x')")
    update(conn, "ALTER TABLE ddl_j.t ALTER COLUMN a TYPE BIGINT")
    update(conn, "ALTER TABLE ddl_j.t ALTER COLUMN f SET DATA TYPE DOUBLE")
    update(conn, "ALTER TABLE ddl_j.t ALTER COLUMN d TYPE DECIMAL(10, 2)")
    update(conn, "ALTER TABLE ddl_j.t ALTER COLUMN a DROP NOT NULL")
    fields = {f.name: (f.field_type, f.required) for f in reader_catalog.load_table("ddl_j.t").schema().fields}
    assert fields["a"] == (LongType(), False) and fields["f"][0] == DoubleType()
    assert fields["d"][0] == DecimalType(10, 2)
    update(conn, "INSERT INTO ddl_j.t VALUES (NULL, 2.5, 99999.99, 'y')")  # old file read with the new types
    assert rows(conn, "SELECT a, f, CAST(d AS VARCHAR) AS d FROM ddl_j.t ORDER BY f") == [
        {"a": 1, "f": 1.5, "d": "12.25"}, {"a": None, "f": 2.5, "d": "99999.99"}]
    head = log_head(reader_catalog)
    for bad, pattern in [
        ("ALTER TABLE ddl_j.t ALTER COLUMN s TYPE INT", "INVALID_ARGUMENT.*cannot change string to int"),
        ("ALTER TABLE ddl_j.t ALTER COLUMN a TYPE INT", "INVALID_ARGUMENT.*cannot change long to int"),
        ("ALTER TABLE ddl_j.t ALTER COLUMN s SET NOT NULL", "INVALID_ARGUMENT.*cannot make it required"),
        ("ALTER TABLE ddl_j.t ALTER COLUMN nope TYPE INT", "NOT_FOUND.*column nope does not exist"),
    ]:
        with pytest.raises(adbc_driver_manager.Error, match=pattern):
            update(conn, bad)
    assert log_head(reader_catalog) == head
