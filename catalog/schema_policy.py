"""How an incoming Arrow stream's schema is matched to a table's schema.

Each table has a policy in the table property ``icefloe.schema-policy``:

- ``evolve`` (default): new input columns are added to the table as nullable columns; a table
  column narrower than the input is widened when Iceberg allows it (int -> long,
  float -> double, decimal(P,S) -> decimal(P',S) with P' > P); nullable table columns absent
  from the input are filled with nulls; input narrower than the table is cast up.
- ``strict``: the input must have exactly the table's columns with the table's types
  (field order is free); nothing about the table changes.

Anything else is refused with a ``SchemaMismatchError`` naming the column: a type clash, a
required table column missing from the input (or holding nulls), duplicate input names, or an
Arrow type Iceberg cannot store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StructType,
)

POLICY_PROPERTY = "icefloe.schema-policy"
EVOLVE = "evolve"
STRICT = "strict"
POLICIES = (EVOLVE, STRICT)


class SchemaMismatchError(ValueError):
    """The input cannot be appended to the table under its schema policy."""


@dataclass
class SchemaPlan:
    """What must change in the table before the input can be written."""

    add_columns: list[tuple[str, IcebergType]] = field(default_factory=list)
    widen_columns: list[tuple[str, IcebergType]] = field(default_factory=list)
    # Top-level required table columns: their input values must hold no nulls.
    required_columns: list[str] = field(default_factory=list)

    @property
    def changes_table(self) -> bool:
        return bool(self.add_columns or self.widen_columns)


def policy_of(properties: dict[str, str]) -> str:
    policy = properties.get(POLICY_PROPERTY, EVOLVE).strip().lower()
    if policy not in POLICIES:
        raise SchemaMismatchError(f"table property {POLICY_PROPERTY}={policy!r} is not one of {', '.join(POLICIES)}")
    return policy


def strip_field_ids(schema: pa.Schema) -> pa.Schema:
    """The input's own field metadata (e.g. Parquet field ids) must not decide Iceberg ids."""
    return pa.schema([f.remove_metadata() for f in schema], metadata=None)


def input_field_type(arrow_field: pa.Field, format_version: int) -> IcebergType:
    """Iceberg type of one input column (raises SchemaMismatchError naming the column)."""
    try:
        converted = _pyarrow_to_schema_without_ids(
            pa.schema([arrow_field]),
            downcast_ns_timestamp_to_us=format_version < 3,
            format_version=format_version,  # type: ignore[arg-type]
        )
    except Exception as exc:  # pyiceberg raises TypeError/ValueError for unsupported Arrow types
        raise SchemaMismatchError(
            f"column {arrow_field.name!r}: Arrow type {arrow_field.type} cannot be stored in Iceberg"
        ) from exc
    return converted.fields[0].field_type


def _widening(narrow: IcebergType, wide: IcebergType) -> bool:
    """True when Iceberg allows promoting a column of type ``narrow`` to ``wide``."""
    if isinstance(narrow, IntegerType) and isinstance(wide, LongType):
        return True
    if isinstance(narrow, FloatType) and isinstance(wide, DoubleType):
        return True
    if isinstance(narrow, DecimalType) and isinstance(wide, DecimalType):
        return narrow.scale == wide.scale and narrow.precision < wide.precision
    return False


def _same_type(a: IcebergType, b: IcebergType) -> bool:
    """Structural equality ignoring field ids (input types carry placeholder ids)."""
    if isinstance(a, StructType) and isinstance(b, StructType):
        if [f.name for f in a.fields] != [f.name for f in b.fields]:
            return False
        return all(_same_type(x.field_type, y.field_type) for x, y in zip(a.fields, b.fields, strict=True))
    if isinstance(a, ListType) and isinstance(b, ListType):
        return _same_type(a.element_type, b.element_type)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return _same_type(a.key_type, b.key_type) and _same_type(a.value_type, b.value_type)
    return a == b


_PLAN_CACHE_SIZE = 256
_plans: OrderedDict[tuple[Any, ...], SchemaPlan | SchemaMismatchError] = OrderedDict()
_plans_lock = threading.Lock()


def schema_text(schema: Schema) -> str:
    """A text that tells schemas apart (ids, names, types, required, defaults, docs, schema id,
    identifier fields), for cache keys.

    Not ``model_dump_json()``: pyiceberg's serializer iterates the model's ``__dict__``, which
    a first use of one of the schema's cached properties (``find_field``, ``name_mapping``...)
    in another thread grows at that moment. Schemas are shared between threads (the catalog's
    metadata cache), and under 8 concurrent writers an append failed with "dictionary changed
    size during iteration". ``repr`` and ``str`` read the fields only.
    """
    return repr(schema) + str(schema)


def plan(table_schema: Schema, input_schema: pa.Schema, policy: str, format_version: int) -> SchemaPlan:
    """Check ``input_schema`` against the table and say what the table needs.

    Results (and refusals) are cached per table schema and input schema: a stream of
    same-shaped appends pays for the comparison once.

    Raises:
        SchemaMismatchError: The input is incompatible (the message names the column).
    """
    key = (schema_text(table_schema), input_schema, policy, format_version)
    with _plans_lock:
        found = _plans.get(key)
    if found is None:
        try:
            found = _plan(table_schema, input_schema, policy, format_version)
        except SchemaMismatchError as exc:
            found = exc
        with _plans_lock:
            _plans[key] = found
            while len(_plans) > _PLAN_CACHE_SIZE:
                _plans.popitem(last=False)
    if isinstance(found, SchemaMismatchError):
        raise SchemaMismatchError(str(found))
    return SchemaPlan(list(found.add_columns), list(found.widen_columns), list(found.required_columns))


def check_unique_names(input_schema: pa.Schema) -> None:
    seen: set[str] = set()
    for name in input_schema.names:
        if name in seen:
            raise SchemaMismatchError(f"column {name!r} appears more than once in the input")
        seen.add(name)


def _plan(table_schema: Schema, input_schema: pa.Schema, policy: str, format_version: int) -> SchemaPlan:
    check_unique_names(input_schema)
    seen = set(input_schema.names)
    result = SchemaPlan()
    table_fields: dict[str, NestedField] = {f.name: f for f in table_schema.fields}
    for arrow_field in input_schema:
        name = arrow_field.name
        given = input_field_type(arrow_field, format_version)
        existing = table_fields.get(name)
        if existing is None:
            if policy == STRICT:
                raise SchemaMismatchError(f"column {name!r} is not in the table (schema policy is strict)")
            result.add_columns.append((name, given))
            continue
        want = existing.field_type
        if _same_type(given, want):
            pass
        elif policy == EVOLVE and _widening(given, want):
            pass  # cast up on write
        elif policy == EVOLVE and _widening(want, given):
            result.widen_columns.append((name, given))
        else:
            raise SchemaMismatchError(
                f"column {name!r}: the table has type {want}, the input has {given}"
                + (
                    " (schema policy is strict)"
                    if policy == STRICT and (_widening(given, want) or _widening(want, given))
                    else ""
                )
            )
        if existing.required:
            result.required_columns.append(name)
    for name, table_field in table_fields.items():
        if name in seen:
            continue
        if table_field.required:
            raise SchemaMismatchError(f"column {name!r} is required by the table but missing from the input")
        if policy == STRICT:
            raise SchemaMismatchError(f"column {name!r} is missing from the input (schema policy is strict)")
    return result


def check_required(batch: pa.RecordBatch, required_columns: list[str]) -> None:
    """Refuse nulls in columns the table declares required."""
    for name in required_columns:
        column = batch.column(name)
        if column.null_count:
            raise SchemaMismatchError(f"column {name!r} is required but the input has {column.null_count} null values")
