"""Schema changes an append commits together with its rows (schema policy ``evolve``).

An append that evolves its table writes its files with the field ids the change assigns on top
of the schema it started from (``stage_schema``), and its commit applies the change again only
if the table is still at that base (``restage_schema``): the same ids result, or the commit is
refused (``ConcurrentSchemaChangeError``) rather than land files whose ids mean other columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import NestedField

from catalog.schema_policy import SchemaPlan


class ConcurrentSchemaChangeError(CommitFailedException):
    """The table's schema changed while an append that evolves it was being written."""


@dataclass(frozen=True)
class StagedSchema:
    """A schema evolution an append will commit together with its rows.

    The files are written with the field ids this change assigns on top of the base schema;
    the commit re-applies it only if the table is still at that base (same ids result).
    """

    plan: SchemaPlan
    base_schema_id: int
    base_last_column_id: int
    metadata: TableMetadata  # the table metadata with the change applied (not committed)


def apply_plan(update: Any, schema_plan: SchemaPlan) -> None:
    for column, column_type in schema_plan.add_columns:
        update.add_column(column, column_type)
    for column, column_type in schema_plan.widen_columns:
        update.update_column(column, field_type=column_type)

def stage_schema(table: Table, schema_plan: SchemaPlan) -> StagedSchema:
    """Apply the evolution to a transaction that is never committed, to learn field ids."""
    tx = table.transaction()
    with tx.update_schema() as update:
        apply_plan(update, schema_plan)
    return StagedSchema(
        plan=schema_plan,
        base_schema_id=table.metadata.current_schema_id,
        base_last_column_id=table.metadata.last_column_id,
        metadata=tx.table_metadata,
    )


def restage_schema(table: Table, tx: Any, staged: StagedSchema) -> None:
    """Put the append's schema change into ``tx`` if its field ids still come out the same."""
    current = table.metadata
    wanted = staged.metadata.schema()
    if current.current_schema_id == staged.base_schema_id and current.last_column_id == staged.base_last_column_id:
        with tx.update_schema() as update:
            apply_plan(update, staged.plan)
        if tx.table_metadata.schema().as_struct() == wanted.as_struct():
            return
    elif all(has_field(current.schema(), f) for f in wanted.fields):
        return  # someone made the very same change already: the files fit as they are
    raise ConcurrentSchemaChangeError(
        f"the schema of {table.name()[-1]} changed while this append was evolving it; nothing was committed, retry"
    )


def has_field(schema: Schema, wanted: NestedField) -> bool:
    try:
        found = schema.find_field(wanted.field_id)
    except ValueError:
        return False
    return found.name == wanted.name and found.field_type == wanted.field_type
