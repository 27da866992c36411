"""Rows on their way into a table: column order, types and NOT NULL checks."""

from __future__ import annotations

import uuid

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
                column = _cast(column, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as exc:
                source = source_names[i] if i < len(source_names) else field.name
                raise errors.InvalidArgument(
                    f"{what}: column {field.name} ({_type_name(field.type)}) cannot hold {source} "
                    f"({_type_name(column.type)}): {errors.first_line(exc)}"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def input_names(pins: list[PinnedTable]) -> list[str]:
    """Qualified names of the catalog tables a statement read (lineage inputs)."""
    return sorted({".".join((*p.namespace, p.name)) for p in pins})


def _type_name(typ: pa.DataType) -> str:
    return "uuid" if isinstance(typ, pa.UuidType) else str(typ)


def _cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``column`` as ``target``. DuckDB hands a UUID over as its text (``CAST(... AS UUID)``,
    ``uuid()``) and Arrow has no cast from text to Iceberg's 16-byte UUID: parse it here."""
    if isinstance(target, pa.UuidType):
        storage = target.storage_type
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            values = [None if v is None else _uuid_bytes(v) for v in column.to_pylist()]
            raw = pa.array(values, storage)
        elif column.type == storage or pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            raw = pc.cast(column, storage, safe=True).combine_chunks()
        else:
            raise ValueError(f"{column.type} is not a UUID (text or 16 bytes)")
        return pa.chunked_array([pa.ExtensionArray.from_storage(target, raw)], target)
    return pc.cast(column, target, safe=True)


def _uuid_bytes(text: str) -> bytes:
    try:
        return uuid.UUID(text).bytes
    except ValueError:
        raise ValueError(f"{text[:60]!r} is not a UUID") from None
