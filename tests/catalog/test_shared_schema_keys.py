"""Cache keys of shared schemas never iterate the schema model's ``__dict__``.

pyiceberg's ``Schema`` fills cached properties into its ``__dict__`` on first use, and the
catalog shares schema objects between threads: an append keying a cache with
``model_dump_json()`` (which iterates that dict) failed under concurrent writers with
"dictionary changed size during iteration". The dict is replaced here by one that refuses
iteration, which is what a concurrent insert does to an iteration in progress."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from catalog.schema_policy import plan, schema_text
from catalog.writer import _layout


class _GrowingDict(dict[str, Any]):
    def __iter__(self) -> Any:
        raise RuntimeError("dictionary changed size during iteration")


def _being_filled_in(schema: Schema) -> Schema:
    object.__setattr__(schema, "__dict__", _GrowingDict(schema.__dict__))
    return schema


def _schema() -> Schema:
    return Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))


def test_the_device_reproduces_the_failure() -> None:
    with pytest.raises(RuntimeError, match="changed size"):
        _being_filled_in(_schema()).model_dump_json()


def test_schema_policy_plans_while_the_schema_is_filled_in() -> None:
    arrow = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
    result = plan(_being_filled_in(_schema()), arrow, "evolve", 2)
    assert not result.changes_table


def test_the_writer_layout_while_the_schema_is_filled_in(tmp_path: Any) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("k", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", _schema())
        _being_filled_in(table.metadata.schema())
        layout = _layout(table.metadata, pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())]))
        assert layout.fast_schema is not None
    finally:
        cat.close()


def test_the_text_tells_schemas_apart() -> None:
    base = _schema()
    variants = [
        Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "s", StringType(), required=False)),
        Schema(NestedField(1, "id", LongType(), required=False), NestedField(3, "s", StringType(), required=False)),
        Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "t", StringType(), required=False)),
        Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False),
               schema_id=4),
        Schema(NestedField(1, "id", LongType(), required=False),
               NestedField(2, "s", StringType(), required=False, doc="a doc")),
        Schema(NestedField(1, "id", LongType(), required=False, initial_default=7),
               NestedField(2, "s", StringType(), required=False)),
    ]
    texts = {schema_text(base), *(schema_text(v) for v in variants)}
    assert len(texts) == 1 + len(variants)
    assert schema_text(_schema()) == schema_text(base)
