"""How an incoming Arrow stream's schema is matched to a table's schema.

Each table has a policy in the table property ``icefloe.schema-policy``, and an append may ask
for another (``icefloe load --evolve``, the call header ``x-icefloe-schema-policy``, which ADBC
sends as ``adbc.flight.sql.rpc.call_header.x-icefloe-schema-policy``, the Spark option
``schema-policy``, ``Table.append(..., schema_policy=)``):

- ``match`` (default, what users of Iceberg engines expect): the input's columns must be table
  columns, and their types the table's or narrower ones that cast up safely (int -> long,
  float -> double, decimal(P,S) -> decimal(P',S) with P' > P); nullable table columns absent
  from the input are filled with nulls. Nothing about the table changes: a typo'd header or a
  wider type is refused, naming every differing column.
- ``evolve``: as ``match``, and in addition new input columns are added to the table as
  nullable columns and a table column narrower than the input is widened when Iceberg allows
  it. A schema change is thus an explicit opt-in, per table or per append.
- ``strict``: the input must have exactly the table's columns with the table's types
  (field order is free). An append cannot ask a strict table to evolve.

Input columns are matched to table columns by name; a name that matches no table column
exactly matches one that differs only in case (``ID`` for ``id``), as SQL engines resolve
names, and is written under the table's name.

Anything else is refused with a ``SchemaMismatchError`` naming the columns: type clashes,
required table columns missing from the input (or holding nulls), duplicate input names, Arrow
types Iceberg cannot store.
"""

from __future__ import annotations

import difflib
import threading
from collections import OrderedDict
from collections.abc import Iterable
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

from catalog.arrow_types import plain_type

POLICY_PROPERTY = "icefloe.schema-policy"
# The per-append choice, as a call header (DoPut, Flight SQL ingest; ADBC through its
# call-header option). flight_server.security.headers.SCHEMA_POLICY_HEADER is the same name.
POLICY_HEADER = "x-icefloe-schema-policy"
MATCH = "match"
EVOLVE = "evolve"
STRICT = "strict"
POLICIES = (MATCH, EVOLVE, STRICT)
DEFAULT_POLICY = MATCH
OPT_IN = (
    f"to add or widen columns, opt in to schema policy {EVOLVE} for this append (icefloe load --evolve, "
    f"header {POLICY_HEADER}: {EVOLVE}) or for the table (property {POLICY_PROPERTY}={EVOLVE})"
)


class SchemaMismatchError(ValueError):
    """The input cannot be appended to the table under its schema policy."""


@dataclass
class SchemaPlan:
    """What must change in the table before the input can be written."""

    add_columns: list[tuple[str, IcebergType]] = field(default_factory=list)
    # Input column -> table column, for names that match only case-insensitively: the
    # input is written under the table's names.
    renames: dict[str, str] = field(default_factory=dict)
    widen_columns: list[tuple[str, IcebergType]] = field(default_factory=list)
    # Top-level required table columns: their input values must hold no nulls.
    required_columns: list[str] = field(default_factory=list)

    @property
    def changes_table(self) -> bool:
        return bool(self.add_columns or self.widen_columns)


def policy_of(properties: dict[str, str], requested: str | None = None) -> str:
    """The policy an append runs under: ``requested`` (the append's own choice) if given, else
    the table's property, else ``match``. A strict table cannot be evolved by an append."""
    table_policy = properties.get(POLICY_PROPERTY, DEFAULT_POLICY).strip().lower()
    if table_policy not in POLICIES:
        raise SchemaMismatchError(
            f"table property {POLICY_PROPERTY}={table_policy!r} is not one of {', '.join(POLICIES)}"
        )
    if requested is None:
        return table_policy
    wanted = check_policy(requested)
    if table_policy == STRICT and wanted == EVOLVE:
        raise SchemaMismatchError(
            f"the table's schema policy is {STRICT} ({POLICY_PROPERTY}): an append cannot evolve it; "
            f"change the table's property first"
        )
    return wanted


def check_policy(value: str) -> str:
    """A schema policy named by a client (case and spaces ignored).

    Raises:
        ValueError: Not a known policy (the message lists them).
    """
    policy = value.strip().lower()
    if policy not in POLICIES:
        raise ValueError(f"schema policy {value!r} is not one of {', '.join(POLICIES)}")
    return policy


def strip_field_ids(schema: pa.Schema) -> pa.Schema:
    """The input's own field metadata (e.g. Parquet field ids) must not decide Iceberg ids."""
    return pa.schema([f.remove_metadata() for f in schema], metadata=None)


def input_field_type(arrow_field: pa.Field, format_version: int) -> IcebergType:
    """Iceberg type of one input column (raises SchemaMismatchError naming the column)."""
    try:
        converted = _pyarrow_to_schema_without_ids(
            pa.schema([arrow_field.with_type(plain_type(arrow_field.type))]),  # a view is its plain layout
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
    return SchemaPlan(list(found.add_columns), dict(found.renames), list(found.widen_columns),
                      list(found.required_columns))


def check_unique_names(input_schema: pa.Schema) -> None:
    seen: set[str] = set()
    for name in input_schema.names:
        if name in seen:
            raise SchemaMismatchError(f"column {name!r} appears more than once in the input")
        seen.add(name)


def _match_names(table_names: list[str], input_names: list[str]) -> dict[str, str]:
    """Input name -> table name: exact matches first, then names equal but for case when
    exactly one unclaimed table column fits (``ID`` and ``Id`` against ``id`` match neither)."""
    matched = {name: name for name in input_names if name in set(table_names)}
    claimed = set(matched.values())
    folded: dict[str, list[str]] = {}
    for name in table_names:
        if name not in claimed:
            folded.setdefault(name.casefold(), []).append(name)
    loose: dict[str, list[str]] = {}
    for name in input_names:
        if name not in matched:
            loose.setdefault(name.casefold(), []).append(name)
    for key, inputs in loose.items():
        candidates = folded.get(key, [])
        if len(inputs) == 1 and len(candidates) == 1:
            matched[inputs[0]] = candidates[0]
    return matched


def _did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _plan(table_schema: Schema, input_schema: pa.Schema, policy: str, format_version: int) -> SchemaPlan:
    check_unique_names(input_schema)
    result = SchemaPlan()
    table_fields: dict[str, NestedField] = {f.name: f for f in table_schema.fields}
    names = _match_names(list(table_fields), input_schema.names)
    unknown: list[str] = []  # input columns the table lacks
    clashes: list[str] = []  # columns whose types cannot be reconciled
    wider: list[str] = []  # columns the input would widen (evolve only)
    for arrow_field in input_schema:
        name = arrow_field.name
        given = input_field_type(arrow_field, format_version)
        table_name = names.get(name)
        if table_name is None:
            if policy == EVOLVE:
                result.add_columns.append((name, given))
            else:
                unknown.append(name)
            continue
        if table_name != name:
            result.renames[name] = table_name
        existing = table_fields[table_name]
        want = existing.field_type
        if _same_type(given, want):
            pass
        elif policy != STRICT and _widening(given, want):
            pass  # cast up on write
        elif policy == EVOLVE and _widening(want, given):
            result.widen_columns.append((table_name, given))
        elif policy == MATCH and _widening(want, given):
            wider.append(f"column {name!r} is {given} in the input, wider than the table's {want}")
        else:
            castable = _widening(given, want) or _widening(want, given)
            clashes.append(
                f"column {name!r}: the table has type {want}, the input has {given}"
                + (" (schema policy is strict)" if policy == STRICT and castable else "")
            )
        if existing.required:
            result.required_columns.append(table_name)
    given_names = set(names.values())
    required_missing = [n for n, f in table_fields.items() if n not in given_names and f.required]
    optional_missing = [n for n, f in table_fields.items() if n not in given_names and not f.required]
    problems: list[str] = list(clashes)
    if unknown:
        absent = [n for n in table_fields if n not in given_names]
        listed = ", ".join(f"{n!r}{_did_you_mean(n, absent)}" for n in unknown)
        problems.append(
            f"column{'s' if len(unknown) > 1 else ''} {listed} {'are' if len(unknown) > 1 else 'is'} not in the table"
            f" (its columns: {', '.join(table_fields)})"
            + (" (schema policy is strict)" if policy == STRICT else "")
        )
    if wider:
        problems.append("; ".join(wider))
    for name in required_missing:
        problems.append(f"column {name!r} is required by the table but missing from the input")
    if policy == STRICT:
        for name in optional_missing:
            problems.append(f"column {name!r} is missing from the input (schema policy is strict)")
    if problems:
        hint = f"; {OPT_IN}" if policy == MATCH and (unknown or wider) else ""
        raise SchemaMismatchError("; ".join(problems) + hint)
    return result


def renamed(schema: pa.Schema, batches: Iterable[pa.RecordBatch], renames: dict[str, str]
            ) -> tuple[pa.Schema, Iterable[pa.RecordBatch]]:
    """The input under the table's names (``SchemaPlan.renames``); zero-copy."""
    if not renames:
        return schema, batches
    names = [renames.get(n, n) for n in schema.names]
    target = pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)], metadata=schema.metadata)
    return target, (b.rename_columns(names) for b in batches)


def check_required(batch: pa.RecordBatch, required_columns: list[str]) -> None:
    """Refuse nulls in columns the table declares required."""
    for name in required_columns:
        column = batch.column(name)
        if column.null_count:
            raise SchemaMismatchError(f"column {name!r} is required but the input has {column.null_count} null values")
