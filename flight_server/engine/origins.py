"""Where a query's result columns come from: the table column behind each one, if any.

Flight SQL clients show a column's catalog, schema, table and type name from metadata on the
result schema's fields (JDBC ``ResultSetMetaData``, arrow-go, ADBC). Only columns that come
straight from a table column have an origin: ``*`` / ``t.*`` and plain column references of a
top-level ``SELECT`` over tables and joins of tables. Everything else (expressions, aggregates,
subqueries, set operations) has none. When the expansion does not line up with the bound
result (``USING`` joins merge columns, for one), no column gets an origin rather than a wrong one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.types import NestedField


@dataclass(frozen=True)
class ColumnOrigin:
    """The table column a result column is read from."""

    namespace: tuple[str, ...]
    table: str
    field: NestedField
    read_only: bool  # time travel views and metadata tables cannot be written
    nullable: bool  # False only where a NOT NULL column cannot gain nulls (no outer join)


@dataclass(frozen=True)
class Source:
    """A table in the FROM clause, by the name the query uses for it."""

    name: str
    namespace: tuple[str, ...]
    table: str
    fields: list[NestedField]
    read_only: bool


def result_origins(
    statement: dict[str, Any], source: Callable[[tuple[str, ...], str], Source | None]
) -> list[ColumnOrigin | None]:
    """One origin (or None) per result column of ``statement`` (DuckDB's serialized tree);
    an empty list when the columns cannot be traced (callers check the length against the
    bound result, and use none of them if it differs).

    ``source(parts, alias)`` resolves a table reference to its columns (None: not a table).
    """
    none: list[ColumnOrigin | None] = []
    node = statement.get("node") or {}
    if node.get("type") != "SELECT_NODE":
        return none
    sources: list[Source] = []
    outer = _collect(node.get("from_table"), source, sources)
    if outer is None:
        return none
    out: list[ColumnOrigin | None] = []
    for item in node.get("select_list") or []:
        expanded = _item(item, sources, not outer)
        if expanded is None:
            return none
        out.extend(expanded)
    return out


def _collect(table: Any, source: Callable[[tuple[str, ...], str], Source | None], out: list[Source]) -> bool | None:
    """Add the FROM clause's tables to ``out``; True if an outer join is involved, None when
    some relation has columns we cannot name (a subquery, a table function)."""
    if not isinstance(table, dict):
        return None
    kind = table.get("type")
    if kind == "EMPTY":
        return False
    if kind == "BASE_TABLE":
        names = (table.get("catalog_name"), table.get("schema_name"), table.get("table_name"))
        parts = tuple(str(p) for p in names if p)
        found = source(parts, str(table.get("alias") or parts[-1]))
        if found is None:
            return None
        out.append(found)
        return False
    if kind == "JOIN":
        left = _collect(table.get("left"), source, out)
        right = _collect(table.get("right"), source, out)
        if left is None or right is None or table.get("using_columns"):
            return None
        if table.get("ref_type") not in (None, "REGULAR"):  # NATURAL, ASOF, ...: merged columns
            return None
        return left or right or str(table.get("join_type", "INNER")) not in ("INNER", "SEMI", "ANTI")
    return None


def _item(item: Any, sources: list[Source], no_outer: bool) -> list[ColumnOrigin | None] | None:
    if not isinstance(item, dict):
        return None
    if item.get("class") == "STAR":
        if item.get("exclude_list") or item.get("replace_list") or item.get("rename_list") or item.get("columns") \
                or item.get("expr") or item.get("qualified_exclude_list"):
            return None
        relation = str(item.get("relation_name") or "")
        chosen = [s for s in sources if not relation or s.name.lower() == relation.lower()]
        if relation and len(chosen) != 1:
            return None
        return [_origin(s, f, no_outer) for s in chosen for f in s.fields]
    if item.get("class") == "COLUMN_REF":
        names = [str(n) for n in item.get("column_names") or []]
        if len(names) == 1:
            candidates = [(s, f) for s in sources for f in s.fields if f.name.lower() == names[0].lower()]
        elif len(names) == 2:
            candidates = [(s, f) for s in sources if s.name.lower() == names[0].lower()
                          for f in s.fields if f.name.lower() == names[1].lower()]
        else:
            candidates = []
        return [_origin(*candidates[0], no_outer) if len(candidates) == 1 else None]
    return [None]


def _origin(source: Source, field: NestedField, no_outer: bool) -> ColumnOrigin:
    return ColumnOrigin(source.namespace, source.table, field, source.read_only,
                        nullable=not (field.required and no_outer))
