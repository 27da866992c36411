"""Spark filters (``DataSourceReader.pushFilters``) as SQL predicates for the server.

Only what renders exactly is pushed: comparisons, ``IN``, null tests, ``NOT`` of those and the
three string matches, on top-level columns, with literals that are booleans, whole numbers,
finite floats, decimals, strings, bytes or dates. Everything else goes back to Spark, which
then filters the rows itself. Literals are rendered inline rather than bound as parameters
because the server splits only unparameterised scans into several endpoints; strings are quoted
with embedded quotes doubled and identifiers double-quoted, so no value can leave its literal.
String matches use ``starts_with`` / ``ends_with`` / ``contains`` (no ``LIKE`` wildcards to
escape).
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from pyspark_icefloe.connection import quote_identifier

_COMPARISONS: dict[type, str] = {
    EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=",
    EqualNullSafe: "IS NOT DISTINCT FROM",
}
_STRING_MATCHES: dict[type, str] = {
    StringStartsWith: "starts_with", StringEndsWith: "ends_with", StringContains: "contains",
}


class _Unsupported(Exception):
    pass


def literal(value: Any) -> str:
    """``value`` as a SQL literal of its own type.

    Raises:
        _Unsupported: A value that has no exact literal here (timestamps, NaN, nested values).
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"CAST({value} AS HUGEINT)" if abs(value) >= 2**63 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Unsupported
        return f"CAST({value!r} AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise _Unsupported
        return f"'{value}'::DECIMAL(38, {max(0, -value.as_tuple().exponent)})"  # type: ignore[operator]
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (bytes, bytearray)):
        return "from_hex('" + bytes(value).hex() + "')"
    if isinstance(value, datetime.datetime):
        raise _Unsupported  # Spark hands naive local datetimes; the zone is ambiguous
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    raise _Unsupported


def _column(attribute: tuple[str, ...], columns: set[str]) -> str:
    if len(attribute) != 1 or attribute[0] not in columns:
        raise _Unsupported  # nested fields are not pushed
    return quote_identifier(attribute[0])


def predicate(f: Filter, columns: set[str]) -> str:
    """One filter as a SQL predicate.

    Raises:
        _Unsupported: The filter cannot be pushed.
    """
    kind = type(f)
    if kind in _COMPARISONS:
        if getattr(f, "value", None) is None:
            raise _Unsupported
        return f"{_column(f.attribute, columns)} {_COMPARISONS[kind]} {literal(f.value)}"  # type: ignore[attr-defined]
    if isinstance(f, In):
        values = [v for v in f.value if v is not None]
        if not values:
            raise _Unsupported
        rendered = ", ".join(literal(v) for v in values)
        return f"{_column(f.attribute, columns)} IN ({rendered})"
    if isinstance(f, IsNull):
        return f"{_column(f.attribute, columns)} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{_column(f.attribute, columns)} IS NOT NULL"
    if kind in _STRING_MATCHES:
        value = f.value  # type: ignore[attr-defined]
        if not isinstance(value, str):
            raise _Unsupported
        return f"{_STRING_MATCHES[kind]}({_column(f.attribute, columns)}, {literal(value)})"  # type: ignore[attr-defined]
    if isinstance(f, Not):
        return f"NOT ({predicate(f.child, columns)})"
    raise _Unsupported


def split(filters: list[Filter], columns: set[str]) -> tuple[list[str], list[Filter]]:
    """(SQL predicates for the filters that can be pushed, the filters Spark must apply)."""
    pushed: list[str] = []
    rest: list[Filter] = []
    for f in filters:
        try:
            pushed.append(predicate(f, columns))
        except _Unsupported:
            rest.append(f)
    return pushed, rest
