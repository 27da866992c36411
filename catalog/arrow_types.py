"""Arrow's view layouts (``string_view``, ``binary_view``, ``list_view``) as the plain layouts
an Iceberg type stands for.

Current writers (``tpchgen-cli`` 4, polars, DuckDB with ``produce_arrow_string_view``) hand over
view-typed columns. Iceberg has one string type, so the values are the same; but a Parquet
file keeps the writer's Arrow schema in its footer, and Arrow's dataset scanner reads such a
column back as a view while the filters pushed into it (by DuckDB, by us) are typed by the
table's plain schema: ``equal(string, string_view)`` has no kernel. So appends write plain
layouts (``plain_schema`` / ``to_plain``), and readers of files written otherwise
(``view_columns``) read those columns as dictionaries, a path that ignores the stored layout.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def plain_type(typ: pa.DataType) -> pa.DataType:
    """``typ`` with every view layout, at any depth, replaced by its large plain form (64-bit
    offsets: a view array's data may exceed what 32-bit offsets address)."""
    if pa.types.is_string_view(typ):
        return pa.large_string()
    if pa.types.is_binary_view(typ):
        return pa.large_binary()
    if pa.types.is_list_view(typ) or pa.types.is_large_list_view(typ):
        return pa.large_list(typ.value_field.with_type(plain_type(typ.value_type)))
    if pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(plain_type(typ.value_type)))
    if pa.types.is_large_list(typ):
        return pa.large_list(typ.value_field.with_type(plain_type(typ.value_type)))
    if pa.types.is_fixed_size_list(typ):
        return pa.list_(typ.value_field.with_type(plain_type(typ.value_type)), typ.list_size)
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(plain_type(f.type)) for f in typ])
    if pa.types.is_map(typ):
        return pa.map_(typ.key_field.with_type(plain_type(typ.key_type)),
                       typ.item_field.with_type(plain_type(typ.item_type)), typ.keys_sorted)
    if pa.types.is_dictionary(typ):
        return pa.dictionary(typ.index_type, plain_type(typ.value_type), typ.ordered)
    return typ


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with plain layouts only (the same object when it has no view layout)."""
    fields = [f.with_type(plain_type(f.type)) for f in schema]
    if all(f.type == g.type for f, g in zip(fields, schema, strict=True)):
        return schema
    return pa.schema(fields, metadata=schema.metadata)


def to_plain(data: Any) -> Any:
    """A RecordBatch or Table with plain layouts only (itself when it has none)."""
    target = plain_schema(data.schema)
    if target is data.schema:
        return data
    columns = [plain_array(c) if c.type != f.type else c for c, f in zip(data.columns, target, strict=True)]
    return type(data).from_arrays(columns, schema=target)


def plain_array(array: Any) -> Any:
    """An Array or ChunkedArray in its plain layout (``plain_type``)."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([plain_array(c) for c in array.chunks], plain_type(array.type))
    typ = array.type
    if pa.types.is_list_view(typ) or pa.types.is_large_list_view(typ):
        # Not Arrow's cast: pyarrow 26 casts list_view to list wrongly when an empty or null
        # entry shares its offset with the next one ([[a], null, [a]] -> [[a], null, []]).
        # Each entry's values, in order, are what flatten() gives; offsets follow from lengths.
        lengths = pc.fill_null(pc.list_value_length(array), 0)
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths).cast(pa.int64())])
        values = plain_array(array.flatten())
        return pa.LargeListArray.from_arrays(offsets, values, type=plain_type(typ), mask=array.is_null())
    if pa.types.is_struct(typ) and plain_type(typ) != typ:
        children = [plain_array(array.field(i)) for i in range(typ.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(plain_type(typ)), mask=array.is_null())
    return array.cast(plain_type(typ)) if plain_type(typ) != typ else array


def view_columns(physical: pa.Schema) -> frozenset[str]:
    """Top-level columns a Parquet footer's Arrow schema stores as ``string_view`` /
    ``binary_view``: read them as dictionaries (``ParquetReadOptions.dictionary_columns``),
    which the scan casts to the dataset's plain type, so filters on them bind."""
    return frozenset(f.name for f in physical if pa.types.is_string_view(f.type) or pa.types.is_binary_view(f.type))


# Arrow's allocator aligns every buffer to 64 bytes; a buffer that is not at least 8-aligned
# came from elsewhere (Flight hands record batches whose buffers point into the gRPC message).
_ALIGNMENT = 8


def aligned(table: pa.Table) -> pa.Table:
    """``table`` with every column whose buffers are not ``_ALIGNMENT``-aligned copied into
    fresh (aligned) buffers; itself when all are aligned. pyiceberg-core's partition transforms
    (Rust, through the C data interface) panic on unaligned buffers ("Memory pointer from
    external source ... is not aligned"), which turned a DoPut into a bucket-partitioned table
    into an internal error."""
    columns = list(table.columns)
    changed = False
    for i, column in enumerate(columns):
        if any(b is not None and b.address % _ALIGNMENT for chunk in column.chunks for b in _buffers(chunk)):
            # concatenating allocates new buffers, even for a single chunk (the empty second one)
            columns[i] = pa.chunked_array([pa.concat_arrays([*column.chunks, pa.array([], column.type)])])
            changed = True
    return pa.Table.from_arrays(columns, schema=table.schema) if changed else table


def _buffers(array: pa.Array) -> list[Any]:
    """Every buffer of ``array``, its children's and its dictionary's."""
    found = list(array.buffers())
    if pa.types.is_dictionary(array.type):
        found.extend(_buffers(array.dictionary))
    return found
