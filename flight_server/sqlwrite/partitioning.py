"""``PARTITIONED BY (...)`` -> an Iceberg partition spec.

Accepted items: a column (identity), ``year(c)``, ``month(c)``, ``day(c)``, ``hour(c)``,
``bucket(n, c)`` and ``truncate(w, c)``. Every write path (SQL INSERT, UPDATE / DELETE
rewrites, DoPut appends through pyiceberg) splits rows by the spec, because pyiceberg's
writer partitions by the table's current spec (transforms run in ``pyiceberg-core``).
"""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from sqlglot import exp

from flight_server import errors

_UNARY: dict[str, Callable[[], Transform]] = {  # type: ignore[type-arg]
    "year": YearTransform, "years": YearTransform, "month": MonthTransform, "months": MonthTransform,
    "day": DayTransform, "days": DayTransform, "hour": HourTransform, "hours": HourTransform,
}
_FIRST_PARTITION_FIELD_ID = 1000


def partition_spec(properties: exp.Expression | None, schema: Schema, what: str) -> PartitionSpec:
    """The spec a ``CREATE TABLE``'s ``PARTITIONED BY`` asks for (unpartitioned without one)."""
    if properties is None:
        return UNPARTITIONED_PARTITION_SPEC
    items: list[exp.Expression] = []
    for prop in properties.expressions:
        if isinstance(prop, exp.PartitionedByProperty):
            target = prop.this
            items.extend(target.expressions if isinstance(target, (exp.Schema, exp.Tuple)) else [target])
        else:
            raise errors.Unimplemented(f"{what}: table option {prop.sql(dialect='duckdb')} is not supported")
    if not items:
        return UNPARTITIONED_PARTITION_SPEC
    fields = []
    for i, item in enumerate(items):
        column, transform, label = _transform(item, what)
        try:
            source = schema.find_field(column, case_sensitive=False)
        except ValueError:
            raise errors.InvalidArgument(f"{what} PARTITIONED BY: no column {column}") from None
        if not transform.can_transform(source.field_type):
            raise errors.InvalidArgument(
                f"{what} PARTITIONED BY: {label} cannot be applied to {source.name} ({source.field_type})")
        name = source.name if isinstance(transform, IdentityTransform) else f"{source.name}_{label}"
        fields.append(PartitionField(source_id=source.field_id, field_id=_FIRST_PARTITION_FIELD_ID + i,
                                     transform=transform, name=name))
    return PartitionSpec(*fields)


def _column(node: exp.Expression | None, what: str) -> str:
    if isinstance(node, (exp.Column, exp.Identifier)):
        return str(node.name)
    raise errors.InvalidArgument(f"{what} PARTITIONED BY: expected a column name")


def _width(node: exp.Expression | None, what: str) -> int:
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit() and int(node.this) > 0:
        return int(node.this)
    raise errors.InvalidArgument(f"{what} PARTITIONED BY: bucket / truncate need a positive integer")


def _transform(item: exp.Expression, what: str) -> tuple[str, Transform, str]:  # type: ignore[type-arg]
    if isinstance(item, (exp.Identifier, exp.Column)):
        return str(item.name), IdentityTransform(), "identity"
    if isinstance(item, exp.PartitionedByBucket):
        n = _width(item.expression, what)
        return _column(item.this, what), BucketTransform(n), "bucket"
    if isinstance(item, exp.PartitionByTruncate):
        w = _width(item.expression, what)
        return _column(item.this, what), TruncateTransform(w), "trunc"
    name = (item.key if not isinstance(item, exp.Anonymous) else str(item.this)).lower()
    if name in _UNARY:
        arg = item.expressions[0] if isinstance(item, exp.Anonymous) and item.expressions else item.this
        return _column(arg, what), _UNARY[name](), name.rstrip("s")
    raise errors.InvalidArgument(
        f"{what} PARTITIONED BY: {item.sql(dialect='duckdb')} is not a supported partition "
        "(column, year/month/day/hour(col), bucket(n, col), truncate(w, col))")
