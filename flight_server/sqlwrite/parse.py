"""Statement structure for SQL writes, from sqlglot's DuckDB dialect.

Why sqlglot: DuckDB's own serializer (``json_serialize_sql``) only handles SELECT, and the
write path needs the structure of INSERT / UPDATE / DELETE / DDL (target, column lists,
BY NAME, SET assignments, ALTER actions, IF [NOT] EXISTS, CASCADE). DuckDB still decides
what a statement *is* (``extract_statements``, in the engine) and what its expressions and
types *mean*: every expression sqlglot hands out is run by DuckDB, and column types are
resolved by DuckDB (see ``types``).

Parameters: ``?`` markers are numbered (``$1``, ``$2``, ...) in document order before any
fragment is generated, so the same values can be bound to fragments that repeat or reorder
them (an UPDATE's condition is used twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from flight_server import errors
from flight_server.engine import CATALOG_NAME
from flight_server.engine.sql_text import marker_spans

DIALECT = "duckdb"


def parse(sql: str) -> exp.Expression:
    try:
        tree = sqlglot.parse(sql, read=DIALECT)
    except sqlglot.errors.ParseError as exc:
        raise errors.InvalidArgument(f"could not parse the statement: {_first_line(str(exc))}") from None
    statements = [t for t in tree if t is not None]
    if len(statements) != 1:
        raise errors.InvalidArgument(f"expected exactly one SQL statement, got {len(statements)}")
    node = statements[0]
    counter = 0

    def number(n: exp.Expression) -> exp.Expression:
        nonlocal counter
        if isinstance(n, exp.Placeholder) and not n.this:
            counter += 1
            return exp.Placeholder(this=str(counter))
        return n

    return node.transform(number)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def sql_of(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


@dataclass(frozen=True)
class TableName:
    namespace: tuple[str, ...]
    name: str

    @property
    def qualified(self) -> str:
        return ".".join((*self.namespace, self.name))

    @property
    def identifier(self) -> tuple[str, ...]:
        return (*self.namespace, self.name)


def _check_catalog(catalog: str) -> None:
    if catalog and catalog != CATALOG_NAME:
        raise errors.NotFound(f"catalog {catalog!r} does not exist (the catalog is {CATALOG_NAME!r})")


def table_name(node: exp.Expression, default_schema: tuple[str, ...] | None) -> TableName:
    """Namespace and name of a table reference (``t``, ``ns.t``, ``"a.b".t``, ``icefloe.ns.t``)."""
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table) or not node.name:
        raise errors.InvalidArgument("expected a table name")
    _check_catalog(node.catalog)
    if node.db:
        namespace = tuple(node.db.split("."))
    elif default_schema:
        namespace = default_schema
    else:
        raise errors.InvalidArgument(f"table {node.name}: name its namespace (ns.{node.name}) or set a schema")
    return TableName(namespace, node.name)


def schema_name(node: exp.Expression) -> tuple[str, ...]:
    """Namespace of a CREATE / DROP SCHEMA target (``s``, ``"a.b"``, ``icefloe.s``)."""
    if isinstance(node, exp.Table):
        if node.db:
            _check_catalog(node.catalog)
            return tuple(node.db.split("."))
        if node.name:
            return tuple(node.name.split("."))
    raise errors.InvalidArgument("expected a schema name")


def table_reference(node: exp.Table, view_sql: str) -> str:
    """The target of a DELETE / UPDATE as a FROM item over ``view_sql`` (the view has the
    table's own name, so ``t.col`` resolves), keeping the alias the statement gave it."""
    if not node.alias:
        return view_sql
    return f"{view_sql} AS {exp.to_identifier(node.alias, quoted=True).sql(dialect=DIALECT)}"


def bind_subset(sql: str, params: list[Any] | None) -> tuple[str, list[Any] | None]:
    """``sql`` (built from fragments of a statement) with only the parameters it uses.

    Fragments keep the statement's numbering (``$2`` stays ``$2``), but DuckDB refuses values
    for parameters a query does not mention, so the used ones are renumbered ``$1..$k``.
    """
    if not params:
        return sql, params
    edits, _ = marker_spans(sql)
    if not edits:
        return sql, None
    order: list[int] = []
    out = sql
    for start, end in reversed(edits):
        token = sql[start:end]
        if not token[1:].isdigit():
            raise errors.InvalidArgument(f"named parameter {token} is not supported in SQL writes; use ? or $n")
        number = int(token[1:])
        if not 1 <= number <= len(params):
            raise errors.InvalidArgument(f"parameter {token} has no value ({len(params)} given)")
        if number not in order:
            order.append(number)
    order.sort()
    for start, end in reversed(edits):
        number = int(sql[start + 1 : end])
        out = out[:start] + f"${order.index(number) + 1}" + out[end:]
    return out, [params[n - 1] for n in order]
