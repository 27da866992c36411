"""File pruning: simple WHERE conjuncts of a single-table query as an Iceberg row filter.

Iceberg's manifests keep per-file column bounds, so ``plan_files(row_filter)`` drops files that
cannot hold a matching row before any Parquet footer is read. DuckDB still applies the full
WHERE clause (and prunes row groups inside the files it scans); this only has to be implied by
it. So only top-level AND conjuncts of the form ``column <op> literal`` are used, with literals
of the column's own kind (no implicit casts that could round), and anything else is ignored,
which can only make the filter looser, never wrong.
"""

from __future__ import annotations

from typing import Any

import sqlglot
import sqlglot.errors
from pyiceberg import expressions
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IntegerType, LongType, StringType
from sqlglot import exp

# pyiceberg's expression classes are pydantic models whose typed signatures mypy cannot follow.
ice: Any = expressions
ALWAYS_TRUE: expressions.BooleanExpression = expressions.AlwaysTrue()

_INT_TYPES = (IntegerType, LongType)
_FLOAT_TYPES = (DoubleType,)  # not float32: its bounds would be compared at another precision
_FLIP: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.GT: exp.LT,
    exp.LT: exp.GT,
    exp.GTE: exp.LTE,
    exp.LTE: exp.GTE,
    exp.EQ: exp.EQ,
}
_ICE: dict[type[exp.Expression], Any] = {
    exp.EQ: ice.EqualTo,
    exp.GT: ice.GreaterThan,
    exp.GTE: ice.GreaterThanOrEqual,
    exp.LT: ice.LessThan,
    exp.LTE: ice.LessThanOrEqual,
}


def row_filter(sql: str, schema: Schema) -> expressions.BooleanExpression:
    """An Iceberg filter implied by ``sql``'s WHERE clause, or AlwaysTrue."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return ALWAYS_TRUE
    if not isinstance(tree, exp.Select):
        return ALWAYS_TRUE
    tables = [t for t in tree.find_all(exp.Table) if isinstance(t.this, exp.Identifier)]
    if len(tables) != 1 or tree.args.get("joins"):
        return ALWAYS_TRUE
    where = tree.args.get("where")
    if where is None:
        return ALWAYS_TRUE
    fields = {f.name.lower(): f for f in schema.fields}
    result: expressions.BooleanExpression = ALWAYS_TRUE
    for conjunct in _conjuncts(where.this):
        expr = _convert(conjunct, fields)
        if expr is not None:
            result = expr if isinstance(result, ice.AlwaysTrue) else ice.And(result, expr)
    return result


def _conjuncts(node: Any) -> list[Any]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _convert(node: Any, fields: dict[str, Any]) -> Any:
    """One conjunct as an Iceberg expression, or None when it is not a safe simple comparison."""
    if type(node) in _ICE:
        left, right, kind = node.left, node.right, type(node)
        if isinstance(left, exp.Column) or not isinstance(right, exp.Column):
            column, literal = left, right
        else:
            column, literal, kind = right, left, _FLIP[kind]
        name, value = _column(column, fields), None
        if name is not None:
            value = _literal(literal, fields[name.lower()].field_type)
        if name is None or value is None:
            return None
        return _ICE[kind](name, value)
    if isinstance(node, exp.Between):
        name = _column(node.this, fields)
        if name is None:
            return None
        low = _literal(node.args.get("low"), fields[name.lower()].field_type)
        high = _literal(node.args.get("high"), fields[name.lower()].field_type)
        if low is None or high is None:
            return None
        return ice.And(ice.GreaterThanOrEqual(name, low), ice.LessThanOrEqual(name, high))
    if isinstance(node, exp.In) and not node.args.get("query"):
        name = _column(node.this, fields)
        if name is None:
            return None
        values = [_literal(v, fields[name.lower()].field_type) for v in node.expressions]
        if not values or any(v is None for v in values):
            return None
        return ice.In(name, set(values))
    return None


def _column(node: Any, fields: dict[str, Any]) -> str | None:
    if not isinstance(node, exp.Column):
        return None
    field = fields.get(node.name.lower())
    return None if field is None else str(field.name)


def _literal(node: Any, field_type: Any) -> Any:
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    if not isinstance(node, exp.Literal):
        return None
    text = node.this
    if node.is_string:
        return None if negative or not isinstance(field_type, StringType) else text
    if isinstance(field_type, _INT_TYPES):
        try:
            value: Any = int(text)
        except ValueError:
            return None  # 2.5 against an integer column: DuckDB compares as decimal; do not round
    elif isinstance(field_type, _FLOAT_TYPES):
        try:
            value = float(text)
        except ValueError:
            return None
    else:
        return None
    return -value if negative else value


def plain_projection(sql: str) -> list[str] | None:
    """For ``SELECT <columns or *> FROM one_table`` and nothing else: the selected column names
    (``*`` for all), in order; None for any other query.

    Such a query needs no SQL engine at all: the scan itself is the result.
    """
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    if any(value for key, value in tree.args.items() if key not in ("expressions", "from", "from_", "kind")):
        return None
    source = tree.args.get("from") or tree.args.get("from_")  # the key's name varies across sqlglot versions
    if source is None or not isinstance(source.this, exp.Table) or not isinstance(source.this.this, exp.Identifier):
        return None
    if source.this.args.get("pivots") or source.this.args.get("joins"):
        return None
    out: list[str] = []
    for item in tree.expressions:
        if isinstance(item, exp.Star) and not any(item.args.values()):
            out.append("*")
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Identifier):
            out.append(item.name)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star) and not any(item.this.args.values()):
            out.append("*")
        else:
            return None
    return out
