"""Input datasets and column lineage of ``INSERT ... SELECT`` and CTAS statements (sqlglot).

Only what the SQL text determines is reported: if a projection cannot be traced to concrete
columns of concrete tables (an unknown table, ``SELECT *`` over a table we have no schema for,
a table function, a column count that does not match the target), column lineage is left out
instead of guessed. Inputs are every qualified table the query reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.lineage import lineage as trace_column
from sqlglot.optimizer.qualify import qualify

logger = logging.getLogger("icefloe.lineage.sql")

DIALECT = "duckdb"
CATALOG_NAME = "icefloe"

# A column a target column (or the whole output) depends on.
InputField = tuple[str, str]  # (qualified table name, column name)


@dataclass
class ColumnDependency:
    source: InputField
    type: str  # DIRECT | INDIRECT
    subtype: str  # IDENTITY | TRANSFORMATION | AGGREGATION | FILTER | JOIN | GROUP_BY | SORT


@dataclass
class SqlLineage:
    inputs: list[str] = field(default_factory=list)
    # target column -> direct dependencies; None when lineage cannot be determined.
    columns: dict[str, list[ColumnDependency]] | None = None
    # dependencies of the whole output (filters, joins, grouping)
    dataset: list[ColumnDependency] = field(default_factory=list)


def _table_name(table: exp.Table) -> str | None:
    parts = [p.name for p in table.parts]
    if len(parts) > 2 and parts[0].lower() == CATALOG_NAME:
        parts = parts[1:]
    if len(parts) < 2:
        return None  # unqualified: the namespace cannot be known from the text
    return ".".join(parts)


def _query_of(statement: exp.Expr) -> tuple[exp.Table | None, list[str], exp.Query | None]:
    """(target table, explicit target columns, source query) of an INSERT or CTAS."""
    if isinstance(statement, exp.Insert | exp.Create):
        if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() != "TABLE":
            return None, [], None
        target = statement.this
        columns: list[str] = []
        if isinstance(target, exp.Schema):
            columns = [c.name for c in target.expressions]
            target = target.this
        query = statement.expression
        if isinstance(target, exp.Table) and isinstance(query, exp.Query):
            return target, columns, query
    return None, [], None


def _input_tables(query: exp.Query) -> list[str]:
    cte_names = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    names: list[str] = []
    for table in query.find_all(exp.Table):
        if not table.db and table.name in cte_names:
            continue
        name = _table_name(table)
        if name is not None and name not in names:
            names.append(name)
    return names


def _sqlglot_schema(inputs: list[str], columns_of: Callable[[str], list[str] | None]) -> dict[str, object] | None:
    schema: dict[str, object] = {}
    for name in inputs:
        cols = columns_of(name)
        if cols is None:
            return None
        *levels, table = name.split(".")
        node = schema
        for level in levels:
            node = node.setdefault(level, {})  # type: ignore[assignment]
        node[table] = {c: "VARCHAR" for c in cols}
    # sqlglot wants every table at the same depth; mixed depths are too dynamic for us.
    depths = {len(n.split(".")) for n in inputs}
    return schema if len(depths) <= 1 else None


def _direct_subtype(projection: exp.Expr) -> str:
    inner = projection.this if isinstance(projection, exp.Alias) else projection
    if isinstance(inner, exp.Column):
        return "IDENTITY"
    if inner.find(exp.AggFunc) is not None:
        return "AGGREGATION"
    return "TRANSFORMATION"


def _trace(
    query: exp.Query, schema: dict[str, object], target_columns: list[str]
) -> dict[str, list[ColumnDependency]] | None:
    qualified = qualify(query.copy(), schema=schema, dialect=DIALECT, validate_qualify_columns=True)
    if not isinstance(qualified, exp.Query) or any(isinstance(s, exp.Star) for s in qualified.selects):
        return None
    selects = qualified.named_selects
    if len(selects) != len(target_columns) or len(selects) != len(qualified.selects):
        return None
    result: dict[str, list[ColumnDependency]] = {}
    for target, projection, name in zip(target_columns, qualified.selects, selects, strict=True):
        node = trace_column(name, qualified, schema=schema, dialect=DIALECT)
        subtype = _direct_subtype(projection)
        deps: list[ColumnDependency] = []
        for leaf in node.walk():
            if leaf.downstream:
                continue
            if not isinstance(leaf.expression, exp.Table):
                continue  # a literal or a column of something that is not a table
            table_name = _table_name(leaf.expression)
            column = exp.to_column(leaf.name).name
            if table_name is None or not column:
                return None
            dep = ColumnDependency((table_name, column), "DIRECT", subtype)
            if dep not in deps:
                deps.append(dep)
        result[target] = deps
    return result


def _dataset_dependencies(query: exp.Query) -> list[ColumnDependency]:
    """Filter / join / grouping columns of a flat SELECT (nested queries: none reported)."""
    if not isinstance(query, exp.Select) or query.find(exp.Subquery) or query.args.get("with"):
        return []
    aliases: dict[str, str] = {}
    for table in query.find_all(exp.Table):
        name = _table_name(table)
        if name is not None:
            aliases[table.alias_or_name] = name
    found: list[ColumnDependency] = []
    clauses = [("where", "FILTER"), ("group", "GROUP_BY"), ("order", "SORT"), ("having", "FILTER")]
    parts: list[tuple[exp.Expression, str]] = [(query.args[k], s) for k, s in clauses if query.args.get(k)]
    parts += [(join.args["on"], "JOIN") for join in query.args.get("joins") or [] if join.args.get("on")]
    for clause, subtype in parts:
        for column in clause.find_all(exp.Column):
            source = aliases.get(column.table)
            if source is None:
                continue
            dep = ColumnDependency((source, column.name), "INDIRECT", subtype)
            if dep not in found:
                found.append(dep)
    return found


def analyze(
    sql: str,
    target: str,
    target_columns: list[str],
    columns_of: Callable[[str], list[str] | None],
) -> SqlLineage:
    """Inputs and column lineage of ``sql`` when it writes ``target``.

    Args:
        sql: The statement text (DuckDB dialect).
        target: The table the commit wrote (``ns.table``); a statement writing elsewhere
            yields nothing.
        target_columns: The target table's columns in order (used when the INSERT names none).
        columns_of: Column names of an input table, or None when unknown.
    """
    try:
        statement = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError:
        return SqlLineage()
    table, explicit_columns, query = _query_of(statement)
    if table is None or query is None or _table_name(table) != target:
        return SqlLineage()
    return _query_lineage(query, explicit_columns or target_columns, columns_of)


def analyze_view(
    sql: str, dialect: str, columns: list[str], columns_of: Callable[[str], list[str] | None]
) -> SqlLineage:
    """Inputs and column lineage of a view's query (its output columns are ``columns``).

    Args:
        sql: The view's SELECT, in ``dialect`` (an Iceberg view representation's dialect).
        dialect: sqlglot's name for it; an unknown dialect yields nothing.
        columns: The view schema's columns in order.
        columns_of: Column names of an input table, or None when unknown.
    """
    try:
        statement = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, ValueError):  # ValueError: a dialect sqlglot does not know
        return SqlLineage()
    if not isinstance(statement, exp.Query):
        return SqlLineage()
    return _query_lineage(statement, columns, columns_of)


def _query_lineage(query: exp.Query, columns: list[str], columns_of: Callable[[str], list[str] | None]) -> SqlLineage:
    inputs = _input_tables(query)
    result = SqlLineage(inputs=inputs)
    schema = _sqlglot_schema(inputs, columns_of)
    if schema is None or not inputs:
        return result
    try:
        result.columns = _trace(query, schema, columns)
        if result.columns is not None:
            qualified = qualify(query.copy(), schema=schema, dialect=DIALECT)
            if isinstance(qualified, exp.Query):
                result.dataset = _dataset_dependencies(qualified)
    except Exception as exc:  # sqlglot raises many types for queries it cannot resolve
        logger.debug("column lineage not determined: %s", type(exc).__name__)
        result.columns = None
    return result
