"""Rows on their way into a table: column order, types and NOT NULL checks."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from flight_server import errors
from flight_server.engine import PinnedTable


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema rows of a table are written with (required columns non-nullable)."""
    return schema_to_pyarrow(schema, include_field_ids=False)


def conform_batch(batch: pa.RecordBatch, schema: Schema, source_names: list[str], what: str) -> pa.RecordBatch:
    table = conform(pa.Table.from_batches([batch]), schema, source_names, what)
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)


def conform(data: pa.Table, schema: Schema, source_names: list[str], what: str) -> pa.Table:
    """``data`` (columns in table order) with the table's Arrow types and nullability.

    Raises INVALID_ARGUMENT when a required column holds NULL or a value does not fit.
    """
    target = arrow_schema(schema)
    if data.num_columns != len(target):
        raise errors.InvalidArgument(f"{what}: expected {len(target)} columns, got {data.num_columns}")
    columns = []
    for i, field in enumerate(target):
        column = data.column(i)
        if not field.nullable and column.null_count:
            raise errors.InvalidArgument(f"{what}: NULL in column {field.name}, which is NOT NULL")
        if column.type != field.type:
            try:
                column = pc.cast(column, field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                source = source_names[i] if i < len(source_names) else field.name
                raise errors.InvalidArgument(
                    f"{what}: column {field.name} ({field.type}) cannot hold {source} ({column.type}): {exc}"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def input_names(pins: list[PinnedTable]) -> list[str]:
    """Qualified names of the catalog tables a statement read (lineage inputs)."""
    return sorted({".".join((*p.namespace, p.name)) for p in pins})
