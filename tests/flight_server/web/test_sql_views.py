"""Iceberg views over Flight SQL: CREATE [OR REPLACE] VIEW and DROP VIEW store Iceberg views
(dialect duckdb) that the REST catalog serves; queries read views (also ones another engine
wrote in Spark SQL, translated by sqlglot; a dialect it cannot read is a precise error);
GetTables lists them as VIEW."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import pytest
from adbc_driver_flightsql import dbapi as flightsql
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyiceberg.view.metadata import ViewVersion

from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url, sql
from tests.servers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("sqlviews") / "wh") as proc:
        sql(proc.location, "CREATE SCHEMA sv")
        sql(proc.location, "CREATE TABLE sv.t (id BIGINT, name VARCHAR)")
        sql(proc.location, "INSERT INTO sv.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        yield proc


def _rows(server: ServerProcess, query: str) -> list[dict[str, Any]]:
    return sql(server.location, query).to_pylist()


def test_create_query_replace_drop_view(server: ServerProcess) -> None:
    sql(server.location, "CREATE VIEW sv.big AS SELECT id, name FROM sv.t WHERE id >= 2")
    assert _rows(server, "SELECT * FROM sv.big ORDER BY id") == [{"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    assert _rows(server, "SELECT count(*) AS n FROM sv.big b JOIN sv.t t ON b.id = t.id") == [{"n": 2}]
    # Stored as an Iceberg view any REST client can load
    view = RestCatalog("r", uri=rest_url(server)).load_view("sv.big")
    representation = view.current_version().representations[0].root
    assert (representation.dialect, representation.sql) == ("duckdb", "SELECT id, name FROM sv.t WHERE id >= 2")
    assert [f.name for f in view.schema().fields] == ["id", "name"]
    with pytest.raises(adbc_driver_manager.Error, match="already exists"):
        sql(server.location, "CREATE VIEW sv.big AS SELECT 1 AS x")
    sql(server.location, "CREATE OR REPLACE VIEW sv.big AS SELECT id FROM sv.t WHERE id = 1")
    assert _rows(server, "SELECT * FROM sv.big") == [{"id": 1}]
    assert RestCatalog("r", uri=rest_url(server)).load_view("sv.big").metadata.current_version_id == 2
    sql(server.location, "DROP VIEW sv.big")
    with pytest.raises(adbc_driver_manager.Error, match="does not exist"):
        sql(server.location, "SELECT * FROM sv.big")
    sql(server.location, "DROP VIEW IF EXISTS sv.big")
    operations = [r.operation for r in commit_records(server.warehouse) if r.table == "big"]
    assert operations == ["view-create", "view-replace", "view-drop"]


def test_views_are_listed_as_view(server: ServerProcess) -> None:
    sql(server.location, "CREATE VIEW sv.listed AS SELECT name FROM sv.t")
    with flightsql.connect(server.location, autocommit=True) as conn:
        objects = conn.adbc_get_objects(depth="tables", db_schema_filter="sv").read_all().to_pylist()
        tables = {t["table_name"]: t["table_type"] for c in objects for s in c["catalog_db_schemas"]
                  for t in s["db_schema_tables"]}
        assert tables["listed"] == "VIEW" and tables["t"] == "TABLE"
        only_views = conn.adbc_get_objects(depth="tables", db_schema_filter="sv", table_types_filter=["VIEW"])
        names = [t["table_name"] for c in only_views.read_all().to_pylist() for s in c["catalog_db_schemas"]
                 for t in s["db_schema_tables"]]
        assert "listed" in names and "t" not in names
        assert conn.adbc_get_table_schema("listed", db_schema_filter="sv").names == ["name"]
    sql(server.location, "DROP VIEW sv.listed")


def _spark_view(sql_text: str, dialect: str) -> ViewVersion:
    return ViewVersion(**{  # type: ignore[arg-type]
        "version-id": 1, "schema-id": 0, "default-namespace": ["sv"],
        "representations": [{"type": "sql", "sql": sql_text, "dialect": dialect}],
    })


def test_views_other_engines_wrote_are_translated_or_refused_precisely(server: ServerProcess) -> None:
    rest = RestCatalog("r", uri=rest_url(server))
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    # Spark SQL: backquoted names, unqualified table in the view's default namespace
    rest.create_view("sv.from_spark", schema, _spark_view("SELECT `id` FROM `t` WHERE `id` < 3", "spark"))
    assert _rows(server, "SELECT id FROM sv.from_spark ORDER BY id") == [{"id": 1}, {"id": 2}]
    rest.create_view("sv.odd", schema, _spark_view("SELECT id FROM t", "some-engine"))
    refused = r"view sv.odd has no SQL icefloe can run \(dialects: some-engine"
    with pytest.raises(adbc_driver_manager.Error, match=refused):
        sql(server.location, "SELECT * FROM sv.odd")
    rest.drop_view("sv.from_spark")
    rest.drop_view("sv.odd")
