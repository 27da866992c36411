"""Schema policy matrix over DoPut: match (default), evolve (per table or per append) and strict,
every accepted and refused shape."""

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
    make_table(warehouse, "ns.ev", BASE, properties={"icefloe.schema-policy": "evolve"})
    make_table(warehouse, "ns.st", BASE, properties={"icefloe.schema-policy": "strict"})
    make_table(warehouse, "ns.mt", BASE)  # no property: the default, match
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
    for name in ("ev", "st", "mt"):
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


def test_default_refuses_a_typo_and_names_every_differing_column(
    policy_server: ServerProcess, warehouse: Path
) -> None:
    """A CSV-like input with a wrong header used to add columns to the table."""
    head = _head(warehouse)
    typo = pa.table({"id": pa.array([1], pa.int64()), "ii": pa.array([2], pa.int32()), "ss": ["a"]})
    with pytest.raises(pa.ArrowInvalid) as info:
        do_put(policy_server.location, ("ns", "mt"), typo)
    message = str(info.value)
    assert "INVALID_ARGUMENT" in message
    assert "columns 'ii' (did you mean 'i'?), 'ss' (did you mean 's'?) are not in the table" in message, message
    assert "x-icefloe-schema-policy: evolve" in message and "--evolve" in message
    assert _head(warehouse) == head
    schema, _ = _table(warehouse, "ns.mt")
    assert [f.name for f in schema.fields] == BASE.names  # type: ignore[attr-defined]


def test_default_refuses_widening_but_casts_narrower_input_up(policy_server: ServerProcess, warehouse: Path) -> None:
    head = _head(warehouse)
    wide = BASE.set(1, pa.field("i", pa.int64()))  # int64 into an INTEGER column
    with pytest.raises(pa.ArrowInvalid) as info:
        do_put(policy_server.location, ("ns", "mt"), pa.Table.from_pylist([_row(i=2**40)], schema=wide))
    assert "column 'i' is long in the input, wider than the table's int" in str(info.value), info.value
    assert _head(warehouse) == head
    narrow = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("f", pa.float32())])
    assert do_put(policy_server.location, ("ns", "mt"), pa.Table.from_pylist([{"id": 5, "f": 0.5}], schema=narrow))[
        "rows"
    ] == 1  # int32 into a BIGINT column is a safe cast
    schema, data = _table(warehouse, "ns.mt")
    assert schema.find_field("id").field_type == LongType()  # type: ignore[attr-defined]
    assert schema.find_field("i").field_type.__class__.__name__ == "IntegerType"  # type: ignore[attr-defined]
    assert data.to_pylist() == [{"id": 5, "i": None, "f": 0.5, "d": None, "s": None}]


def test_names_differing_only_in_case_match_the_table_s(policy_server: ServerProcess, warehouse: Path) -> None:
    upper = pa.schema([pa.field("ID", pa.int64(), nullable=False), pa.field("S", pa.string())])
    for name in ("mt", "st", "ev"):
        data = pa.Table.from_pylist([{"ID": 9, "S": "up"}], schema=upper)
        if name == "st":  # strict: every column, but its names still match case-insensitively
            data = pa.Table.from_pylist([{k.upper(): v for k, v in _row(id=9, s="up").items()}],
                                        schema=pa.schema([f.with_name(f.name.upper()) for f in BASE]))
        assert do_put(policy_server.location, ("ns", name), data)["rows"] == 1
        schema, rows = _table(warehouse, f"ns.{name}")
        assert [f.name for f in schema.fields] == BASE.names, name  # type: ignore[attr-defined]
        assert rows.filter(pa.compute.equal(rows["id"], 9)).column("s").to_pylist() == ["up"]


def test_per_append_evolve_header(policy_server: ServerProcess, warehouse: Path) -> None:
    wider = BASE.append(pa.field("extra", pa.string())).set(1, pa.field("i", pa.int64()))
    data = pa.Table.from_pylist([_row(id=11, i=2**40, extra="x")], schema=wider)
    assert do_put(policy_server.location, ("ns", "mt"), data, schema_policy="evolve")["rows"] == 1
    schema, rows = _table(warehouse, "ns.mt")
    assert schema.find_field("extra") is not None  # type: ignore[attr-defined]
    assert schema.find_field("i").field_type == LongType()  # type: ignore[attr-defined]
    # The table's own policy is still match: the next append of a new column is refused.
    with pytest.raises(pa.ArrowInvalid, match="'more' is not in the table"):
        do_put(policy_server.location, ("ns", "mt"), pa.table({"id": [12], "more": ["y"]}))
    # A strict table cannot be evolved by an append; an unknown policy is refused.
    head = _head(warehouse)
    with pytest.raises(pa.ArrowInvalid, match="schema policy is strict"):
        do_put(policy_server.location, ("ns", "st"), data, schema_policy="evolve")
    with pytest.raises(pa.ArrowInvalid, match="schema policy 'grow' is not one of match, evolve, strict"):
        do_put(policy_server.location, ("ns", "mt"), data, schema_policy="grow")
    assert _head(warehouse) == head


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


def test_an_empty_append_under_evolve_commits_the_schema_change_alone(
    policy_server: ServerProcess, warehouse: Path
) -> None:
    """How a distributed writer (the Spark source) evolves a table before staging its rows: a
    DoPut of no rows under evolve commits the schema change (one ``schema`` commit); under match
    the same stream is refused, and an evolve that changes nothing commits nothing."""
    wider = pa.schema([*BASE, pa.field("extra", pa.string())]).set(1, pa.field("i", pa.int64()))
    empty = wider.empty_table()
    with pytest.raises(pa.ArrowInvalid, match="extra"):
        do_put(policy_server.location, ("ns", "mt"), empty)
    cat = read_only(warehouse)
    try:
        head = cat.log.head()
    finally:
        cat.close()
    answer = do_put(policy_server.location, ("ns", "mt"), empty, schema_policy="evolve")
    assert answer["rows"] == 0
    cat = read_only(warehouse)
    try:
        schema = cat.load_table("ns.mt").schema()
        assert schema.find_field("extra") is not None and isinstance(schema.find_field("i").field_type, LongType)
        assert cat.log.head() == head + 1
        assert cat.log.get(head + 1).operation == "schema"  # type: ignore[union-attr]
        assert cat.load_table("ns.mt").current_snapshot() is None, "no rows, no snapshot"
    finally:
        cat.close()
    do_put(policy_server.location, ("ns", "mt"), empty, schema_policy="evolve")
    cat = read_only(warehouse)
    try:
        assert cat.log.head() == head + 1, "nothing left to evolve: nothing committed"
    finally:
        cat.close()
