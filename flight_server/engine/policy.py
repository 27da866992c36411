"""What client SQL may do in the engine, checked on DuckDB's own parse tree.

DuckDB's sandbox settings (no external access, locked configuration) are the outer wall; this
is the inner one, and it holds even where DuckDB makes exceptions of its own (it always lets
SQL read its temp directory, for one). A query runs only if its parse tree
(``json_serialize_sql``, DuckDB's parser, never a text search) shows:

- table functions from a short allow-list (``range``, ``unnest``, ...): no file readers, no
  ``glob``, no ``query()``, no ``duckdb_settings()`` / ``duckdb_extensions()`` / secrets;
- no scalar function that reveals the server (``current_setting``, ``getvariable``, ...) or
  a macro that reads DuckDB's catalog;
- table references that are CTEs in scope or icefloe tables (so neither file names nor
  DuckDB's internal views such as ``sqlite_master`` or ``duckdb_settings``);
- ``AT (VERSION | TIMESTAMP => ...)`` with a constant expression only.

``EXPLAIN [ANALYZE]`` is checked through the statement it explains. Anything the parser cannot
serialize as a plain query (PIVOT statements, SHOW TABLES, ...) is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from flight_server import errors

# Table functions client SQL may call: they compute rows from their arguments and nothing else.
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "repeat_row",
    "generate_subscripts", "regexp_split_to_table", "pg_timezone_names", "icu_calendar_names",
})
# Scalar functions that would tell a client about the server, its settings or its engine state.
BLOCKED_FUNCTIONS = frozenset({
    "current_setting", "getvariable", "getenv", "current_query", "current_query_id",
    "current_connection_id", "current_transaction_id", "database_list", "show_databases",
    "database_size", "import_database", "copy_database", "extension_versions", "force_checkpoint",
    "enable_checkpoint_on_shutdown", "disable_checkpoint_on_shutdown", "enable_profile",
    "disable_profile", "write_log", "parse_duckdb_log_message", "duckdb_logs_parsed",
    "duckdb_profiling_settings", "platform", "pg_postmaster_start_time", "pg_conf_load_time",
    "inet_client_addr", "inet_client_port", "inet_server_addr", "inet_server_port", "get_block_size",
    "pg_get_viewdef", "pg_get_constraintdef", "pg_get_expr",
})
# AT (...) expressions: constants, casts, and these functions and operators only.
_AT_FUNCTIONS = frozenset({
    "+", "-", "*", "now", "current_timestamp", "get_current_timestamp", "transaction_timestamp",
    "current_date", "today", "to_years", "to_months", "to_weeks", "to_days", "to_hours", "to_minutes",
    "to_seconds", "to_milliseconds", "to_microseconds", "make_timestamp", "make_timestamptz",
    "make_date", "to_timestamp", "epoch_ms", "date_trunc", "/", "trunc", "round", "floor", "ceil", "abs",
})
_AT_CASTS = frozenset({
    "TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATE", "INTERVAL", "VARCHAR",
    "BIGINT", "INTEGER", "HUGEINT", "UBIGINT", "INT8", "INT4", "INT", "LONG", "DOUBLE", "FLOAT", "DECIMAL",
})
_NO_LOCATION = 2**64 - 1


@dataclass(frozen=True)
class TableReference:
    """A table a query names, as its (unquoted) parts, and its ``AT`` clause if it has one.

    ``start`` / ``end`` are byte offsets of the whole reference (name, alias, ``AT`` clause) in
    the statement text the parser saw.
    """

    parts: tuple[str, ...]
    alias: str
    at_unit: str | None
    at_expr: dict[str, Any] | None
    start: int
    end: int


@dataclass
class QueryTree:
    """A checked query: the table references it makes (CTE references left out)."""

    tables: list[TableReference]
    statement: dict[str, Any] | None  # DuckDB's tree of the query (None for EXPLAIN)


def serialize(cur: duckdb.DuckDBPyConnection, sql: str) -> dict[str, Any]:
    """DuckDB's parse tree of one query as JSON.

    Raises:
        errors.InvalidArgument: A syntax error, or a statement DuckDB cannot give as a plain
            query tree (which icefloe then does not run).
    """
    raw = cur.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0]
    doc: dict[str, Any] = json.loads(raw[0]) if raw is not None and raw[0] else {"error": True}
    if doc.get("error"):
        if doc.get("error_type") == "parser":
            raise errors.InvalidArgument(f"Parser Error: {doc.get('error_message', 'syntax error')}")
        raise errors.InvalidArgument("this kind of statement is not supported in icefloe SQL (only plain queries run)")
    statements = doc.get("statements") or []
    if len(statements) != 1:
        raise errors.InvalidArgument(f"expected exactly one SQL statement, got {len(statements)}")
    return dict(statements[0])


def explained_query_offset(sql: str) -> int:
    """Where the statement an ``EXPLAIN [ANALYZE] [(options)]`` explains begins (tokenizer, not text search)."""
    tokens = duckdb.tokenize(sql)
    i = 1  # token 0 is EXPLAIN (the statement type says so)
    if i < len(tokens) and sql[tokens[i][0] :].upper().startswith("ANALYZE"):
        i += 1
    if i < len(tokens) and sql.startswith("(", tokens[i][0]):
        depth = 0
        while i < len(tokens):
            pos = tokens[i][0]
            if tokens[i][1] == duckdb.token_type.operator:
                depth += sql.count("(", pos, pos + 1) - sql.count(")", pos, pos + 1)
            i += 1
            if depth == 0:
                break
    if i >= len(tokens):
        raise errors.InvalidArgument("EXPLAIN needs a query")
    return len(sql[: tokens[i][0]].encode("utf-8"))


def check_query(cur: duckdb.DuckDBPyConnection, sql: str, explain: bool) -> QueryTree:
    """Parse ``sql`` with DuckDB's parser and refuse anything outside the sandbox policy.

    Raises:
        errors.InvalidArgument: Not a single checkable query.
        errors.PermissionDenied: It calls a function or names an object client SQL may not use.
    """
    offset = explained_query_offset(sql) if explain else 0
    text = sql.encode("utf-8")[offset:].decode("utf-8") if offset else sql
    statement = serialize(cur, text)
    tables: list[TableReference] = []
    _walk(statement, frozenset(), tables, offset)
    return QueryTree(tables, None if explain else statement)


def _walk(node: Any, ctes: frozenset[str], out: list[TableReference], offset: int) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, ctes, out, offset)
        return
    if not isinstance(node, dict):
        return
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict) and cte_map.get("map"):
        # A WITH clause's names are visible in its query and everything nested in it
        # (their own bodies included: recursive CTEs).
        ctes = ctes | {str(entry.get("key", "")).lower() for entry in cte_map["map"]}
    kind = node.get("type")
    if kind == "BASE_TABLE":
        _base_table(node, ctes, out, offset)
        return
    if kind == "TABLE_FUNCTION":
        function = node.get("function") or {}
        name = str(function.get("function_name", "")).lower()
        qualifier = [p for p in (function.get("catalog"), function.get("schema")) if p]
        if name not in ALLOWED_TABLE_FUNCTIONS or any(str(q).lower() not in ("system", "main") for q in qualifier):
            raise errors.PermissionDenied(f"not allowed in icefloe SQL: the table function {name}()")
        _walk(function.get("arguments"), ctes, out, offset)
        _walk(node.get("sample"), ctes, out, offset)
        return
    if kind == "SHOW_REF" and node.get("query") is None:
        raise errors.InvalidArgument(
            "SHOW / DESCRIBE of the engine's catalog is not available; use the Flight SQL metadata "
            "commands (GetTables, GetDbSchemas), or DESCRIBE SELECT * FROM ns.t"
        )
    if node.get("class") in ("FUNCTION", "WINDOW", "AGGREGATE") and "function_name" in node:
        name = str(node["function_name"]).lower()
        if name in BLOCKED_FUNCTIONS:
            raise errors.PermissionDenied(f"not allowed in icefloe SQL: the function {name}()")
    for value in node.values():
        if isinstance(value, (dict, list)):
            _walk(value, ctes, out, offset)


def _base_table(node: dict[str, Any], ctes: frozenset[str], out: list[TableReference], offset: int) -> None:
    parts = tuple(str(p) for p in (node.get("catalog_name"), node.get("schema_name"), node.get("table_name")) if p)
    at = node.get("at_clause")
    if len(parts) == 1 and parts[0].lower() in ctes and not at:
        return
    location = int(node.get("query_location", _NO_LOCATION))
    start = offset + location if location != _NO_LOCATION else -1
    end = start + int(node.get("query_location_length", 0)) if start >= 0 else -1
    out.append(TableReference(
        parts, str(node.get("alias") or ""), str(at["unit"]).upper() if at else None,
        at.get("expr") if at else None, start, end,
    ))


def check_at_expression(expr: Any, where: str) -> None:
    """Refuse an ``AT (...)`` expression that is not a constant one (no subquery, column,
    parameter, or function outside a small set of time arithmetic)."""
    if not isinstance(expr, dict):
        raise errors.InvalidArgument(f"{where}: the expression must be a constant")
    cls = expr.get("class")
    if cls == "CONSTANT":
        return
    if cls == "CAST":
        type_name = str((expr.get("type_expr") or {}).get("type_name", "")).upper()
        if type_name not in _AT_CASTS or (expr.get("type_expr") or {}).get("children"):
            raise errors.InvalidArgument(f"{where}: a cast to {type_name or 'this type'} is not allowed here")
        check_at_expression(expr.get("child"), where)
        return
    if cls == "FUNCTION":
        name = str(expr.get("function_name", "")).lower()
        if (name not in _AT_FUNCTIONS or expr.get("filter") or expr.get("distinct")
                or (expr.get("order_bys") or {}).get("orders") or expr.get("schema") or expr.get("catalog")):
            raise errors.InvalidArgument(f"{where}: {name}() is not allowed here (only constant time expressions)")
        for argument in expr.get("arguments") or []:
            check_at_expression(argument.get("expression") if isinstance(argument, dict) else None, where)
        return
    what = {"SUBQUERY": "a subquery", "COLUMN_REF": "a column", "PARAMETER": "a parameter"}.get(str(cls), str(cls))
    raise errors.InvalidArgument(
        f"{where}: {what} is not allowed here (use a literal, a cast, or now() - INTERVAL ...)"
    )


def render_expression(cur: duckdb.DuckDBPyConnection, expr: dict[str, Any]) -> str:
    """A checked expression tree as one SQL query selecting it, rendered by DuckDB itself."""
    raw = cur.execute("SELECT json_serialize_sql('SELECT 1 AS v')").fetchall()[0]
    if raw is None:
        raise errors.InvalidArgument("the AT expression cannot be evaluated")
    template = json.loads(raw[0])
    template["statements"][0]["node"]["select_list"] = [{**expr, "alias": "v"}]
    row = cur.execute("SELECT json_deserialize_sql(?)", [json.dumps(template)]).fetchall()[0]
    if not row or not row[0]:
        raise errors.InvalidArgument("the AT expression cannot be evaluated")
    return str(row[0])
