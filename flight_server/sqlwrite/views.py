"""SQL DDL of Iceberg views: ``CREATE [OR REPLACE] VIEW ns.v AS SELECT ...`` and
``DROP VIEW [IF EXISTS] ns.v``.

The view is an Iceberg view in the catalog (``catalog.views``), the same object the REST
catalog serves to other engines: its SQL in dialect ``duckdb``, its schema the query's result
columns, its default namespace the session's schema (where the unqualified names of its SQL
resolve). The query is planned once at CREATE, so a view over missing tables or outside the
sandbox policy is refused up front. Queries read views through ``engine.view_expansion``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchViewError, TableAlreadyExistsError, ViewAlreadyExistsError
from pyiceberg.view.metadata import ViewVersion
from sqlglot import exp

from catalog import views
from flight_server import errors
from flight_server.sqlwrite import types
from flight_server.sqlwrite.parse import bind_subset, sql_of, table_name
from flight_server.sqlwrite.rows import input_names

if TYPE_CHECKING:
    from flight_server.sqlwrite.write import Write

DIALECT = "duckdb"


def _representations(query_sql: str) -> list[dict[str, str]]:
    """The view's SQL in DuckDB's dialect, and in Spark's when sqlglot can translate it: an
    engine picks the representation of its own dialect (else the first), so Spark reads a
    view icefloe created without parsing DuckDB SQL."""
    found = [{"type": "sql", "sql": query_sql, "dialect": DIALECT}]
    try:
        spark = sqlglot.transpile(query_sql, read=DIALECT, write="spark")
    except sqlglot.errors.SqlglotError:
        return found
    if len(spark) == 1 and spark[0]:
        found.append({"type": "sql", "sql": spark[0], "dialect": "spark"})
    return found


def create_view(w: Write) -> int:
    tree = w.tree
    if isinstance(tree.this, exp.Schema):
        raise errors.Unimplemented("CREATE VIEW: a column list is not supported; alias the query's columns instead")
    target = table_name(tree.this, w.default_schema)
    what = f"CREATE VIEW {target.qualified}"
    query = tree.expression
    if query is None:
        raise errors.InvalidArgument(f"{what}: give the view's query (AS SELECT ...)")
    if not w.catalog.namespace_exists(target.namespace):
        raise errors.NotFound(f"{what}: schema {'.'.join(target.namespace)} does not exist")
    if w.catalog.table_exists(target.identifier):
        raise errors.AlreadyExists(f"{what}: {target.qualified} is a table")
    query_sql = sql_of(query)
    planned, pins = w.engine.plan(query_sql, w.default_schema)
    planned, params = bind_subset(planned, w.params)
    if params:
        raise errors.InvalidArgument(f"{what}: a view's query cannot take parameters")
    schema = types.schema_from_query_types(w.engine.column_types(planned, pins, w.default_schema))
    version = ViewVersion(**{  # type: ignore[arg-type]
        "version-id": 1, "schema-id": 0, "summary": {"engine-name": "icefloe"},
        "representations": _representations(query_sql),
        "default-namespace": list(w.default_schema or target.namespace),
    })
    ns, name = target.namespace, target.identifier[-1]
    if views.exists(w.catalog, ns, name):
        if tree.args.get("exists"):
            return 0
        if not tree.args.get("replace"):
            raise errors.AlreadyExists(f"{what}: view {target.qualified} already exists (CREATE OR REPLACE VIEW)")
        current = views.load(w.catalog, ns, name).metadata
        updates = [
            {"action": "add-schema", "schema": schema.model_dump(by_alias=True)},
            {"action": "add-view-version", "view-version": {**version.model_dump(by_alias=True), "schema-id": -1}},
            {"action": "set-current-view-version", "view-version-id": -1},
        ]
        with w.committing("view-replace", input_names(pins)):
            views.replace(w.catalog, ns, name, [{"type": "assert-view-uuid", "uuid": current.view_uuid}], updates)
        return 0
    try:
        with w.committing("view-create", input_names(pins)):
            views.create(w.catalog, ns, name, schema, version, None, {})
    except (ViewAlreadyExistsError, TableAlreadyExistsError) as exc:
        if tree.args.get("exists") and isinstance(exc, ViewAlreadyExistsError):
            return 0
        raise errors.AlreadyExists(f"{what}: {exc}") from None
    return 0


def drop_view(w: Write) -> int:
    tree = w.tree
    for node in tree.args.get("tables") or [tree.this]:
        target = table_name(node, w.default_schema)
        try:
            with w.committing("view-drop", [target.qualified]):
                views.drop(w.catalog, target.namespace, target.identifier[-1])
        except (NoSuchViewError, NoSuchNamespaceError):
            if not tree.args.get("exists"):
                raise errors.NotFound(f"DROP VIEW: view {target.qualified} does not exist") from None
    return 0
