"""Arrow view arrays (``string_view``, ``binary_view``) gathered from dictionary arrays.

polars holds strings as views: 16 bytes per value, the value itself inline when it has at most
12 bytes, else a prefix and where it lies in a data buffer. A plain ``string`` column handed
to polars is therefore rebuilt value by value (a fifth of a second per 10M short strings), and
Arrow's own dictionary decode costs as much again. A dictionary-coded column needs neither:
the dictionary's few values become views once, and each value's view is a 16-byte gather by
its index. polars and DuckDB take a view column as it is, without a copy.

pyarrow has no ``take`` for view types, so the gather runs in numpy, over the views read as
16-byte ``complex128`` words: numpy copies those bit for bit (no float arithmetic happens).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def view_type(value_type: pa.DataType) -> pa.DataType | None:
    """The view type for a dictionary's value type; None when it has none."""
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        return pa.string_view()
    if pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        return pa.binary_view()
    return None


def dictionary_to_view(column: pa.DictionaryArray) -> pa.Array:
    """``column``'s values as a view array: same values, same nulls, no value decoded.

    Raises:
        TypeError: The dictionary's values are not strings or binaries.
    """
    target = view_type(column.type.value_type)
    if target is None:
        raise TypeError(f"no view type for dictionaries of {column.type.value_type}")
    indices, dictionary = column.indices, column.dictionary
    length = len(indices)
    if indices.null_count == length:
        return pa.nulls(length, target)
    if dictionary.null_count:  # a null value behind a valid index (not what Parquet reads give)
        return column.dictionary_decode().cast(target)
    views = dictionary.cast(target)
    buffers = views.buffers()
    assert buffers[1] is not None
    table = np.frombuffer(buffers[1], dtype=np.complex128)[views.offset:views.offset + len(views)]
    validity, nulls = None, indices.null_count
    if nulls:
        validity = pc.is_valid(indices).buffers()[1]  # a fresh bitmap, offset 0
        indices = indices.fill_null(0)
    gathered = np.take(table, indices.to_numpy(zero_copy_only=False))
    return pa.Array.from_buffers(target, length, [validity, pa.py_buffer(gathered), *buffers[2:]],
                                 null_count=nulls)


def batch_to_views(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with its string/binary dictionary columns as views (``schema``: the batch's,
    with those columns' view types)."""
    columns = [dictionary_to_view(c) if pa.types.is_dictionary(c.type) and view_type(c.type.value_type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
