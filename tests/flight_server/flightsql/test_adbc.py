"""End to end with the stock ADBC Flight SQL driver (dbapi) against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pyarrow as pa
import pytest
from servers import ServerProcess


@pytest.fixture
def conn(uri: str) -> Iterator[Any]:
    connection = fsql.connect(uri, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


def query(conn: Any, sql: str, parameters: Any = None) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table()


def test_select_constant(conn: Any) -> None:
    table = query(conn, "SELECT 1 AS x, 'a' AS y")
    assert table.to_pylist() == [{"x": 1, "y": "a"}]


def test_select_table_reads_every_snapshot_row(conn: Any) -> None:
    table = query(conn, "SELECT id, customer, amount FROM sales.orders ORDER BY id")
    assert table.column("id").to_pylist() == [1, 2, 3, 4]
    assert table.column("customer").to_pylist() == ["ann", "bob", "cy", "dee"]
    assert table.schema.field("amount").type == pa.float64()


def test_catalog_qualified_and_multilevel_names(conn: Any) -> None:
    assert query(conn, "SELECT count(*) AS n FROM icefloe.sales.orders").column("n").to_pylist() == [4]
    assert query(conn, 'SELECT sum(n) AS s FROM "analytics.daily".visits').column("s").to_pylist() == [15]


def test_field_ids_rename_and_added_column(conn: Any) -> None:
    """Old files carry the old name 'b' and no 'c': they must read as 'label' and NULL."""
    table = query(conn, "SELECT a, label, c FROM sales.evolved ORDER BY a")
    assert table.to_pylist() == [
        {"a": 1, "label": "x", "c": None},
        {"a": 2, "label": "y", "c": None},
        {"a": 3, "label": "z", "c": 30},
    ]
    # Filters on a renamed column are pushed through the renaming projection.
    assert query(conn, "SELECT a FROM sales.evolved WHERE label = 'y'").column("a").to_pylist() == [2]


def test_empty_table_has_schema(conn: Any) -> None:
    table = query(conn, "SELECT * FROM sales.empty")
    assert table.num_rows == 0
    assert table.schema.names == ["k"]
    assert table.schema.field("k").type == pa.int32()


def test_parameters(conn: Any) -> None:
    table = query(conn, "SELECT customer FROM sales.orders WHERE id = ? OR amount > ?", (1, 25.0))
    assert sorted(table.column("customer").to_pylist()) == ["ann", "cy"]
    assert query(conn, "SELECT ? + 1 AS x", (41,)).column("x").to_pylist() == [42]
    # The same prepared statement re-bound with new values.
    with conn.cursor() as cur:
        for i in (2, 3):
            cur.execute("SELECT customer FROM sales.orders WHERE id = ?", (i,))
            assert cur.fetchall() == [(["bob", "cy"][i - 2],)]


def test_bad_sql_is_invalid_argument(conn: Any) -> None:
    with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
        query(conn, "SELEC 1")
    assert "INVALID_ARGUMENT" in str(info.value)
    assert "Traceback" not in str(info.value) and ".py" not in str(info.value)


def test_unknown_table_is_not_found(conn: Any) -> None:
    with pytest.raises(adbc_driver_manager.Error) as info:
        query(conn, "SELECT * FROM sales.nope")
    assert "NOT_FOUND" in str(info.value)


def test_refused_sql_write_changes_nothing(conn: Any) -> None:
    with pytest.raises(adbc_driver_manager.Error) as info:
        query(conn, "INSERT INTO sales.orders VALUES (9, 'x')")
    assert "INVALID_ARGUMENT" in str(info.value) and "sales.orders" in str(info.value)
    assert query(conn, "SELECT count(*) AS n FROM sales.orders").column("n").to_pylist() == [4]


def test_get_objects_every_depth(conn: Any) -> None:
    catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
    assert [c["catalog_name"] for c in catalogs] == ["icefloe"]

    schemas = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
    names = sorted(s["db_schema_name"] for s in schemas[0]["catalog_db_schemas"])
    assert names == ["analytics", "analytics.daily", "default", "sales"]

    tables = conn.adbc_get_objects(depth="tables", db_schema_filter="sales").read_all().to_pylist()
    (sales,) = tables[0]["catalog_db_schemas"]
    assert sorted(t["table_name"] for t in sales["db_schema_tables"]) == ["empty", "evolved", "orders"]
    assert {t["table_type"] for t in sales["db_schema_tables"]} == {"TABLE"}

    cols = conn.adbc_get_objects(depth="all", db_schema_filter="sales", table_name_filter="ord%").read_all().to_pylist()
    (sales,) = cols[0]["catalog_db_schemas"]
    (orders,) = sales["db_schema_tables"]
    assert [c["column_name"] for c in orders["table_columns"]] == ["id", "customer", "amount"]
    assert [c["ordinal_position"] for c in orders["table_columns"]] == [1, 2, 3]

    none = conn.adbc_get_objects(depth="tables", catalog_filter="other").read_all().to_pylist()
    assert none == []


def test_get_table_schema_and_types(conn: Any) -> None:
    schema = conn.adbc_get_table_schema("evolved", db_schema_filter="sales")
    assert schema.names == ["a", "label", "c"]
    assert schema.field("label").type == pa.string()
    assert conn.adbc_get_table_types() == ["TABLE", "VIEW"]  # VIEW: Iceberg views


def test_get_info(conn: Any) -> None:
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "icefloe"
    assert info["vendor_version"]
    assert info["vendor_arrow_version"] == pa.__version__


def test_sandbox_refusals_reach_client_cleanly(conn: Any, sample_server: Any) -> None:
    data_file = next((sample_server.warehouse / "sales" / "orders" / "data").rglob("*.parquet"))
    with pytest.raises(adbc_driver_manager.Error) as info:
        query(conn, f"SELECT * FROM read_parquet('{data_file}')")
    assert "PERMISSION_DENIED" in str(info.value) or "UNAUTHORIZED" in str(info.value)


def test_joins_between_tables(conn: Any) -> None:
    """JOIN ... USING needs every table bound at once (a regression: name extraction used to bind)."""
    table = query(conn, "SELECT count(*) AS n FROM sales.orders JOIN (SELECT a AS id FROM sales.evolved) USING (id)")
    assert table.column("n").to_pylist() == [3]
    table = query(conn, "SELECT o.customer FROM sales.orders o JOIN sales.evolved e ON o.id = e.a WHERE e.c = 30")
    assert table.column("customer").to_pylist() == ["cy"]


def test_cte_shadowing_a_name(conn: Any) -> None:
    assert query(conn, "WITH orders AS (SELECT 7 AS x) SELECT x FROM orders").column("x").to_pylist() == [7]


def test_ingest_then_query_with_session_schema(tmp_path: Path) -> None:
    """adbc_ingest is decoded here and committed by the append service; SQL then reads it,
    also unqualified once the session's schema option names the namespace."""
    proc = ServerProcess(tmp_path / "warehouse").start()
    try:
        kwargs = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}
        with fsql.connect(proc.location, db_kwargs=kwargs, autocommit=True) as connection:
            with connection.cursor() as cur:
                assert cur.adbc_ingest("landed", pa.table({"x": [1, 2]}), mode="create", db_schema_name="inbox") == 2
                assert cur.adbc_ingest("landed", pa.table({"x": [3]}), mode="append", db_schema_name="inbox") == 1
            assert query(connection, "SELECT sum(x) AS s FROM inbox.landed").column("s").to_pylist() == [6]
            connection.adbc_connection.set_options(**{"adbc.flight.sql.session.option.schema": "inbox"})
            assert query(connection, "SELECT count(*) AS n FROM landed").column("n").to_pylist() == [3]
            with connection.cursor() as cur:
                assert cur.adbc_ingest("landed", pa.table({"x": [9]}), mode="replace") == 1  # session schema
            assert query(connection, "SELECT x FROM landed").column("x").to_pylist() == [9]
    finally:
        proc.stop()


@pytest.mark.parametrize(
    "projection",
    ["*", "customer, id", "ID", "o.*", "amount"],
)
def test_plain_scans_match_the_duckdb_path(conn: Any, projection: str) -> None:
    """`SELECT cols FROM t` streams the Arrow scan directly; it must equal what DuckDB returns.

    `WHERE true` keeps the same rows but forces the DuckDB path.
    """
    fast = query(conn, f"SELECT {projection} FROM sales.orders o")
    slow = query(conn, f"SELECT {projection} FROM sales.orders o WHERE true")
    assert fast.schema == slow.schema
    assert fast.sort_by(fast.schema.names[0]).equals(slow.sort_by(slow.schema.names[0]))


def test_plain_scan_over_evolved_and_empty_tables(conn: Any) -> None:
    evolved = query(conn, "SELECT * FROM sales.evolved")
    assert sorted(evolved.to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "label": "x", "c": None},
        {"a": 2, "label": "y", "c": None},
        {"a": 3, "label": "z", "c": 30},
    ]
    assert query(conn, "SELECT k FROM sales.empty").num_rows == 0
