"""Schema policy matrix over DoPut: evolve (default) and strict, every accepted and refused shape."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from append_helpers import do_put, make_table, read_only
from pyiceberg.types import DecimalType, DoubleType, LongType
from servers import ServerProcess

BASE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("d", pa.decimal128(9, 2)),
        pa.field("s", pa.string()),
    ]
)


def _row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {"id": 1, "i": 2, "f": 1.5, "d": Decimal("1.25"), "s": "a"}
    row.update(overrides)
    return row


@pytest.fixture
def policy_server(warehouse: Path) -> Iterator[ServerProcess]:
    make_table(warehouse, "ns.ev", BASE)
    make_table(warehouse, "ns.st", BASE, properties={"icefloe.schema-policy": "strict"})
    proc = ServerProcess(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


def _table(warehouse: Path, name: str) -> tuple[object, pa.Table]:
    cat = read_only(warehouse)
    try:
        t = cat.load_table(name)
        return t.schema(), t.scan().to_arrow()
    finally:
        cat.close()


def _head(warehouse: Path) -> int:
    cat = read_only(warehouse)
    try:
        return cat.log.head()
    finally:
        cat.close()


def test_exact_schema_accepted_by_both(policy_server: ServerProcess, warehouse: Path) -> None:
    data = pa.Table.from_pylist([_row()], schema=BASE)
    for name in ("ev", "st"):
        assert do_put(policy_server.location, ("ns", name), data)["rows"] == 1


def test_evolve_adds_nullable_column_and_fills_old_rows(policy_server: ServerProcess, warehouse: Path) -> None:
    do_put(policy_server.location, ("ns", "ev"), pa.Table.from_pylist([_row(id=1)], schema=BASE))
    wider = BASE.append(pa.field("extra", pa.string()))
    do_put(policy_server.location, ("ns", "ev"), pa.Table.from_pylist([_row(id=2, extra="x")], schema=wider))
    schema, data = _table(warehouse, "ns.ev")
    extra = schema.find_field("extra")  # type: ignore[attr-defined]
    assert not extra.required
    got = dict(zip(data.column("id").to_pylist(), data.column("extra").to_pylist(), strict=True))
    assert got == {1: None, 2: "x"}


def test_evolve_widens_int_float_decimal(policy_server: ServerProcess, warehouse: Path) -> None:
    wide = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("i", pa.int64()),
            pa.field("f", pa.float64()),
            pa.field("d", pa.decimal128(18, 2)),
            pa.field("s", pa.string()),
        ]
    )
    big = 2**40
    do_put(
        policy_server.location,
        ("ns", "ev"),
        pa.Table.from_pylist([_row(i=big, f=1e300, d=Decimal("1234567890.12"))], schema=wide),
    )
    schema, data = _table(warehouse, "ns.ev")
    assert schema.find_field("i").field_type == LongType()  # type: ignore[attr-defined]
    assert schema.find_field("f").field_type == DoubleType()  # type: ignore[attr-defined]
    assert schema.find_field("d").field_type == DecimalType(18, 2)  # type: ignore[attr-defined]
    assert data.column("i").to_pylist() == [big]


def test_narrower_input_is_cast_up_and_missing_nullable_filled(policy_server: ServerProcess, warehouse: Path) -> None:
    narrow = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("s", pa.string())])
    do_put(policy_server.location, ("ns", "ev"), pa.Table.from_pylist([{"id": 7, "s": "q"}], schema=narrow))
    schema, data = _table(warehouse, "ns.ev")
    assert schema.find_field("id").field_type == LongType()  # type: ignore[attr-defined]  # unchanged
    assert data.to_pylist() == [{"id": 7, "i": None, "f": None, "d": None, "s": "q"}]


@pytest.mark.parametrize(
    ("name", "schema", "row", "column"),
    [
        ("st", BASE.append(pa.field("extra", pa.string())), _row(extra="x"), "extra"),
        (
            "st",
            pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())]),
            {"id": 1, "s": "a"},
            "i",
        ),
        ("st", BASE.set(1, pa.field("i", pa.int64())), _row(), "i"),
        ("ev", BASE.set(4, pa.field("s", pa.int64())), _row(s=5), "s"),
        ("ev", BASE.set(1, pa.field("i", pa.string())), _row(i="x"), "i"),
        ("ev", BASE.set(3, pa.field("d", pa.decimal128(9, 3))), _row(d=Decimal("1.125")), "d"),
        ("ev", BASE.set(1, pa.field("i", pa.float64())), _row(i=1.0), "i"),
        ("ev", BASE.remove(0), {k: v for k, v in _row().items() if k != "id"}, "id"),
    ],
    ids=[
        "strict-new-col",
        "strict-missing-col",
        "strict-widen",
        "clash-int-into-string",
        "clash-string-into-int",
        "decimal-scale",
        "float-into-int",
        "required-missing",
    ],
)
def test_refused_shapes_name_the_column(
    policy_server: ServerProcess, warehouse: Path, name: str, schema: pa.Schema, row: dict[str, object], column: str
) -> None:
    head = _head(warehouse)
    with pytest.raises(pa.ArrowInvalid) as info:
        do_put(policy_server.location, ("ns", name), pa.Table.from_pylist([row], schema=schema))
    message = str(info.value)
    assert "INVALID_ARGUMENT" in message and f"'{column}'" in message, message
    assert _head(warehouse) == head, "a refused append committed"


def test_null_into_required_column_refused(policy_server: ServerProcess, warehouse: Path) -> None:
    nullable_id = BASE.set(0, pa.field("id", pa.int64(), nullable=True))
    head = _head(warehouse)
    with pytest.raises(pa.ArrowInvalid) as info:
        do_put(
            policy_server.location, ("ns", "ev"), pa.Table.from_pylist([_row(id=1), _row(id=None)], schema=nullable_id)
        )
    assert "'id'" in str(info.value) and "null" in str(info.value)
    assert _head(warehouse) == head
    # Non-null values through a nullable Arrow field are fine.
    assert (
        do_put(policy_server.location, ("ns", "ev"), pa.Table.from_pylist([_row(id=3)], schema=nullable_id))["rows"]
        == 1
    )


def test_duplicate_column_names_refused(policy_server: ServerProcess) -> None:
    dup = pa.Table.from_arrays([pa.array([1], pa.int64()), pa.array(["a"]), pa.array(["b"])], names=["id", "s", "s"])
    with pytest.raises(pa.ArrowInvalid) as info:
        do_put(policy_server.location, ("ns", "ev"), dup)
    assert "'s'" in str(info.value) and "more than once" in str(info.value)
