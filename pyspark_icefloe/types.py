"""Arrow types as the server sends them -> Spark types, and record batches cast to exactly the Arrow
schema Spark derives from the declared Spark schema.

Spark compares every batch a Python data source yields with ``to_arrow_schema(declared)``
exactly (``int32`` vs ``int64``, ``large_string``, a timestamp's zone and non-null flags all
fail otherwise), so every batch goes through :func:`conform`. Every column is declared nullable:
the server's Flight SQL schemas say "not null" only for required Iceberg fields, and a Spark
schema stricter than a later snapshot's would fail that read.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
)

from pyspark_icefloe.connection import IcefloeSparkError


def spark_type(t: pa.DataType) -> DataType:
    """The Spark type that holds Arrow type ``t`` without loss.

    Raises:
        IcefloeSparkError: An Arrow type with no Spark equivalent.
    """
    if isinstance(t, pa.ExtensionType):
        if t.extension_name == "arrow.uuid":
            return StringType()  # Spark has no UUID type; the canonical text form, as SQL shows it
        return spark_type(t.storage_type)
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_int8(t):
        return ByteType()
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return ShortType()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return IntegerType()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return LongType()
    if pa.types.is_uint64(t):
        return DecimalType(20, 0)
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise IcefloeSparkError(f"decimal({t.precision}, {t.scale}) is wider than Spark's decimal(38)")
        return DecimalType(t.precision, t.scale)
    if pa.types.is_date(t):
        return DateType()
    if pa.types.is_time(t):
        return TimeType()
    if pa.types.is_timestamp(t):
        return TimestampType() if t.tz is not None else TimestampNTZType()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return StringType()
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t)):
        return BinaryType()
    if pa.types.is_map(t):
        return MapType(spark_type(t.key_type), spark_type(t.item_type), valueContainsNull=True)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return ArrayType(spark_type(t.value_type), containsNull=True)
    if pa.types.is_struct(t):
        return StructType([StructField(t.field(i).name, spark_type(t.field(i).type), True)
                           for i in range(t.num_fields)])
    if pa.types.is_null(t):
        return StringType()
    raise IcefloeSparkError(f"Arrow type {t} has no Spark equivalent")


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (every field nullable, see the module docstring)."""
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


def target_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks the batches of a read against."""
    return to_arrow_schema(schema)


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s schema: columns by name, in its order, each cast.

    Raises:
        IcefloeSparkError: A declared column is missing from the batch, or a value does not fit.
    """
    if batch.schema.equals(target):
        return batch
    names = batch.schema.names
    columns = []
    for field in target:
        if field.name not in names:
            raise IcefloeSparkError(f"the server's rows have no column {field.name!r} (columns: {names})")
        columns.append(_conform_array(batch.column(names.index(field.name)), field.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _conform_array(array: pa.Array, to: pa.DataType) -> pa.Array:
    if array.type.equals(to):
        return array
    t = array.type
    if isinstance(t, pa.ExtensionType):
        if t.extension_name == "arrow.uuid" and pa.types.is_string(to):
            text = [None if v is None else str(uuid.UUID(bytes=v)) for v in array.storage.to_pylist()]
            return pa.array(text, pa.string())
        return _conform_array(array.storage, to)
    if pa.types.is_struct(t) and pa.types.is_struct(to):
        # flatten() applies the parent's offset (a sliced batch), unlike field()
        by_name = {t.field(i).name: child for i, child in enumerate(array.flatten())}
        children = [_conform_array(by_name[to.field(i).name], to.field(i).type) for i in range(to.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(to), mask=array.is_null())
    if pa.types.is_fixed_size_binary(t) and pa.types.is_binary(to):
        return pa.array(array.to_pylist(), pa.binary())
    try:
        return array.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise IcefloeSparkError(f"cannot hold {t} values as {to}: {exc}") from None


def iceberg_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type a Spark value is sent to the server as: Spark's ``time`` travels as
    ``time64[ns]``, which Iceberg (microseconds) cannot store; Spark's own precision is
    microseconds (``time(6)``), so ``time64[us]`` holds every value. Nested types alike."""
    if pa.types.is_time64(t) and t.unit == "ns":
        return pa.time64("us")
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(iceberg_type(t.key_type)),
                       t.item_field.with_type(iceberg_type(t.item_type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        make = pa.large_list if pa.types.is_large_list(t) else pa.list_
        return make(t.value_field.with_type(iceberg_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(iceberg_type(t.field(i).type)) for i in range(t.num_fields)])
    return t


def iceberg_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field as ``iceberg_type`` sends it."""
    return pa.schema([f.with_type(iceberg_type(f.type)) for f in schema], metadata=schema.metadata)


def for_iceberg(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` as the server can store it (``iceberg_type``); unchanged when it already is.

    Raises:
        IcefloeSparkError: A value that does not fit (sub-microsecond time of day).
    """
    target = iceberg_schema(batch.schema)
    if target.equals(batch.schema):
        return batch
    try:
        return batch.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise IcefloeSparkError(f"cannot send the DataFrame's rows as Iceberg types: {exc}") from None


def to_table_types(batch: pa.RecordBatch, table: pa.Schema | None) -> pa.RecordBatch:
    """``batch`` with the values Spark has no type for turned into the table's: a uuid column
    (Spark writes it as its text, as it reads it) and a fixed-size binary (Spark: binary),
    inside lists and structs too. Other columns are left to the server's schema policy.

    Raises:
        IcefloeSparkError: A text that is not a uuid, a binary of the wrong length.
    """
    if table is None:
        return batch
    by_name = {f.name.lower(): f for f in table}
    columns = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        target = by_name.get(field.name.lower())
        columns.append(column if target is None else _to_table_array(column, target.type, field.name))
    converted = pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    return batch if converted.schema.equals(batch.schema) else converted


def _to_table_array(array: pa.Array, to: pa.DataType, name: str) -> pa.Array:
    t = array.type
    if isinstance(to, pa.BaseExtensionType) and to.extension_name == "arrow.uuid" and (
            pa.types.is_string(t) or pa.types.is_large_string(t)):
        try:
            raw = [None if v is None else uuid.UUID(v).bytes for v in array.to_pylist()]
        except ValueError:
            raise IcefloeSparkError(f"column {name!r} holds a text that is not a UUID") from None
        return pa.ExtensionArray.from_storage(to, pa.array(raw, to.storage_type))
    if pa.types.is_fixed_size_binary(to) and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        values = array.to_pylist()
        if any(v is not None and len(v) != to.byte_width for v in values):
            raise IcefloeSparkError(f"column {name!r} is fixed[{to.byte_width}]: every value must have "
                                    f"{to.byte_width} bytes")
        return pa.array(values, to)
    if pa.types.is_struct(t) and pa.types.is_struct(to):
        targets = {to.field(i).name.lower(): to.field(i).type for i in range(to.num_fields)}
        children = [child if t.field(i).name.lower() not in targets
                    else _to_table_array(child, targets[t.field(i).name.lower()], f"{name}.{t.field(i).name}")
                    for i, child in enumerate(array.flatten())]
        return pa.StructArray.from_arrays(children, names=[t.field(i).name for i in range(t.num_fields)],
                                          mask=array.is_null())
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (pa.types.is_list(to) or pa.types.is_large_list(to)):
        values = _to_table_array(array.values, to.value_type, f"{name}[]")
        if values is array.values:
            return array
        make = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return make.from_arrays(array.offsets, values, mask=array.is_null())
    return array
