"""Pushdown: simple WHERE conjuncts of a single-table query, as an Iceberg row filter and as SQL.

Iceberg's manifests keep per-file column bounds, so ``plan_files(row_filter)`` drops files that
cannot hold a matching row before any Parquet footer is read. DuckDB still applies the full
WHERE clause (and prunes row groups inside the files it scans); this only has to be implied by
it. So only top-level AND conjuncts of the form ``column <op> literal`` are used, with literals
of the column's own kind (no implicit casts that could round), and anything else is ignored,
which can only make the filter looser, never wrong. The same conjuncts, rendered as SQL by us
(never the client's text), filter the native Parquet scan of selective queries (engine.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
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
_FLIP = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE, exp.EQ: exp.EQ}
_OPS = {exp.EQ: "=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_ICE = {"=": "EqualTo", ">": "GreaterThan", ">=": "GreaterThanOrEqual", "<": "LessThan", "<=": "LessThanOrEqual"}


@dataclass(frozen=True)
class Conjunct:
    """``column op value`` (op one of = > >= < <=) or ``column IN values``, with a safe literal."""

    column: str  # the table's column name, as the schema spells it
    op: str
    values: tuple[Any, ...]

    def iceberg(self) -> expressions.BooleanExpression:
        if self.op == "in":
            return ice.In(self.column, set(self.values))  # type: ignore[no-any-return]
        return getattr(ice, _ICE[self.op])(self.column, self.values[0])  # type: ignore[no-any-return]

    def sql(self, column_sql: str) -> str:
        if self.op == "in":
            return f"{column_sql} IN ({', '.join(_sql_literal(v) for v in self.values)})"
        return f"{column_sql} {self.op} {_sql_literal(self.values[0])}"


def _sql_literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)  # int or float, parsed from the client's literal by us


# sqlglot parses in Python: it cannot be interrupted, and on a 1 MB statement it takes tens of
# seconds. Larger statements get no sqlglot analysis (no pushdown), which is still correct.
MAX_ANALYSED_CHARS = 64 * 1024


def parse(sql: str) -> tuple[Any, ...] | None:
    """sqlglot's DuckDB-dialect parse of ``sql`` (None when it cannot parse, or when it is
    longer than ``MAX_ANALYSED_CHARS``), shared by every analysis of one statement (memoized).
    Callers only read trees."""
    return _parse_cached(sql) if len(sql) <= MAX_ANALYSED_CHARS else None


def _parse(sql: str) -> tuple[Any, ...] | None:
    try:
        return tuple(sqlglot.parse(sql, read="duckdb"))
    except (sqlglot.errors.SqlglotError, RecursionError):
        return None


_parse_cached = functools.lru_cache(maxsize=512)(_parse)


def _single(sql: str) -> Any:
    trees = parse(sql)
    return trees[0] if trees is not None and len(trees) == 1 else None


def safe_conjuncts(sql: str, schema: Schema) -> list[Conjunct]:
    """The WHERE conjuncts of a single-table SELECT that are simple comparisons with safe literals."""
    tree = _single(sql)
    if not isinstance(tree, exp.Select):
        return []
    tables = [t for t in tree.find_all(exp.Table) if isinstance(t.this, exp.Identifier)]
    if len(tables) != 1 or tree.args.get("joins"):
        return []
    where = tree.args.get("where")
    if where is None:
        return []
    fields = {f.name.lower(): f for f in schema.fields}
    out: list[Conjunct] = []
    for node in _conjuncts(where.this):
        out.extend(_convert(node, fields))
    return out


def row_filter(sql: str, schema: Schema) -> expressions.BooleanExpression:
    """An Iceberg filter implied by ``sql``'s WHERE clause, or AlwaysTrue."""
    result: expressions.BooleanExpression = ALWAYS_TRUE
    for conjunct in safe_conjuncts(sql, schema):
        expr = conjunct.iceberg()
        result = expr if result is ALWAYS_TRUE else ice.And(result, expr)
    return result


def _conjuncts(node: Any) -> list[Any]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _convert(node: Any, fields: dict[str, Any]) -> list[Conjunct]:
    """One WHERE conjunct as safe Conjuncts ([] when it is not a simple comparison)."""
    if type(node) in _OPS:
        left, right, kind = node.left, node.right, type(node)
        if isinstance(left, exp.Column) or not isinstance(right, exp.Column):
            column, literal = left, right
        else:
            column, literal, kind = right, left, _FLIP[kind]
        name = _column(column, fields)
        value = None if name is None else _literal(literal, fields[name.lower()].field_type)
        if name is None or value is None:
            return []
        return [Conjunct(name, _OPS[kind], (value,))]
    if isinstance(node, exp.Between):
        name = _column(node.this, fields)
        if name is None:
            return []
        low = _literal(node.args.get("low"), fields[name.lower()].field_type)
        high = _literal(node.args.get("high"), fields[name.lower()].field_type)
        if low is None or high is None:
            return []
        return [Conjunct(name, ">=", (low,)), Conjunct(name, "<=", (high,))]
    if isinstance(node, exp.In) and not node.args.get("query"):
        name = _column(node.this, fields)
        if name is None:
            return []
        values = [_literal(v, fields[name.lower()].field_type) for v in node.expressions]
        if not values or any(v is None for v in values):
            return []
        return [Conjunct(name, "in", tuple(values))]
    return []


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
        if not math.isfinite(value):
            return None
    else:
        return None
    return -value if negative else value


def plain_projection(sql: str) -> list[str] | None:
    """For ``SELECT <columns or *> FROM one_table`` and nothing else: the selected column names
    (``*`` for all), in order; None for any other query.

    Such a query needs no SQL engine at all: the scan itself is the result.
    """
    tree = _single(sql)
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
