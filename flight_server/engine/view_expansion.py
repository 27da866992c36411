"""Queries over Iceberg views: each view a query names becomes a subquery of its SQL.

A view is stored SQL (``catalog.views``), possibly written by another engine. Planning
expands views before anything else sees the query, so the expanded text passes the same
sandbox policy, pins the snapshots of the tables the view reads (a ticket carries the
expanded text: a DoGet sees the snapshots pinned at planning, as for tables), and respects
the caller's roles on those tables like any query.

A view's SQL in dialect ``duckdb`` runs as is; one in another dialect (``spark``, ``trino``,
...) is translated by sqlglot; a view with no SQL sqlglot can read is refused with a message
naming its dialects. Unqualified names inside a view resolve in the view's
``default-namespace``, as the view spec says, not in the session's schema.
"""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot import exp

from catalog import keys, views
from flight_server import errors
from flight_server.engine.sql_text import split_namespace
from flight_server.engine.tables import name_candidates

DIALECT = "duckdb"
MAX_DEPTH = 16  # views over views; deeper is almost surely a cycle
# sqlglot dialect names of the engines that write Iceberg views
_DIALECTS = {"duckdb": "duckdb", "spark": "spark", "spark-sql": "spark", "trino": "trino", "presto": "presto",
             "hive": "hive", "flink": "flink" if "flink" in sqlglot.dialects.DIALECTS else "hive",
             "snowflake": "snowflake", "bigquery": "bigquery", "postgres": "postgres", "databricks": "databricks"}


def may_name_a_view(catalog: Any, sql: str) -> bool:
    """Whether ``sql`` may name a view: some view's name occurs in its text. A query over
    tables only is then not parsed a second time (one RocksDB scan of the view keys)."""
    store = getattr(catalog, "store", None)
    if store is None:
        return False
    text = sql.lower()
    return any(keys.decode_view_key(key)[1].lower() in text for key, _ in store.scan(keys.VIEW))


def expand(catalog: Any, sql: str, default_schema: tuple[str, ...] | None) -> str:
    """``sql`` with every view it names replaced by a subquery of the view's SQL (unchanged
    when it names none, or when it does not parse: the policy check then says why)."""
    if not may_name_a_view(catalog, sql):
        return sql
    try:
        tree: Any = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError:
        return sql
    if tree is None or not _expand(catalog, tree, default_schema, 0):
        return sql
    return str(tree.sql(dialect=DIALECT))


def _cte_names(tree: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _expand(catalog: Any, tree: exp.Expression, default_schema: tuple[str, ...] | None, depth: int) -> bool:
    ctes = _cte_names(tree)
    changed = False
    for node in list(tree.find_all(exp.Table)):
        if not isinstance(node.this, exp.Identifier) or node.args.get("version") is not None:
            continue  # a table function, or an AT / time-travel reference: tables only
        parts = tuple(part.name for part in node.parts)
        if len(parts) == 1 and parts[0].lower() in ctes:
            continue
        for ns, name in name_candidates(parts, default_schema):
            if not views.exists(catalog, ns, name):
                continue
            if depth >= MAX_DEPTH:
                raise errors.InvalidArgument(f"view {'.'.join((*ns, name))}: views nest deeper than {MAX_DEPTH} "
                                             "levels (a view that reads itself?)")
            version = _current_version(catalog, ns, name)
            body = _view_query(version, ns, name)
            home = tuple(version.default_namespace or ()) or ns
            _qualify(catalog, body, home)
            _expand(catalog, body, home, depth + 1)
            alias = node.alias or name
            node.replace(exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))))
            changed = True
            break
    return changed


def _qualify(catalog: Any, body: exp.Expression, home: tuple[str, ...]) -> None:
    """Name the namespace of the view body's unqualified tables: its default namespace, not
    the session's schema (a multi-level namespace is one schema name holding dots).

    A name with a catalog part is the writing engine's name for a catalog (Spark writes
    ``ice.ns.t`` when its session calls this catalog ``ice``; the view's ``default-catalog``
    is the session's *current* catalog, often another). icefloe serves one catalog, so such a
    name means this catalog's table when ``ns.t`` exists here; otherwise it stays as written
    and the query fails with NOT_FOUND naming it.
    """
    ctes = _cte_names(body)
    for node in body.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier):
            continue
        if node.catalog and node.db:
            ns, name = (*split_namespace(node.db),), node.name
            if catalog.table_exists((*ns, name)) or views.exists(catalog, ns, name):
                node.set("catalog", None)
        if not node.args.get("db") and node.name.lower() not in ctes:
            node.set("db", exp.to_identifier(".".join(home), quoted=True))


def _current_version(catalog: Any, ns: tuple[str, ...], name: str) -> Any:
    metadata = views.load(catalog, ns, name).metadata
    return next(v for v in metadata.versions if v.version_id == metadata.current_version_id)


def _view_query(version: Any, ns: tuple[str, ...], name: str) -> Any:
    """The view's current SQL as a DuckDB parse tree (translated from its dialect if needed)."""
    representations = [r.root for r in version.representations]
    ordered = sorted(representations, key=lambda r: r.dialect.lower() != DIALECT)  # duckdb first
    qualified = ".".join((*ns, name))
    for representation in ordered:
        dialect = _DIALECTS.get(representation.dialect.lower())
        if dialect is None:
            continue
        try:
            tree: Any = sqlglot.parse_one(representation.sql, read=dialect)
        except sqlglot.errors.ParseError:
            continue
        if isinstance(tree, exp.Query):  # a SELECT, a set operation, a WITH ...
            return tree
    dialects = ", ".join(sorted({r.dialect for r in representations})) or "none"
    raise errors.InvalidArgument(f"view {qualified} has no SQL icefloe can run (dialects: {dialects}; "
                                 "sqlglot could not translate it to DuckDB)")
