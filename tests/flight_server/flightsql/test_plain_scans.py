"""Plain scans (``SELECT cols FROM t``) stream the pinned files' Arrow datasets with no SQL engine
over them, dictionary-encoded strings read as dictionaries: the answers must be exactly the
sandboxed DuckDB path's (same schema, values, nulls, order), for every column type, after
schema evolution (renamed, added columns: several file layouts), at older snapshots and split."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from flightsql_wire import statement_query
from servers import ServerProcess, serving

from flight_server.engine.iceberg_source import dictionary_columns

ROWS = 3000


def _batch(start: int, schema: pa.Schema) -> pa.Table:
    n = ROWS
    ids = list(range(start, start + n))
    columns = {
        "id": pa.array(ids, pa.int64()),
        "small": pa.array([i % 7 for i in ids], pa.int32()),
        "ratio": pa.array([None if i % 11 == 0 else i / 3 for i in ids], pa.float64()),
        # few distinct values, with nulls: stored as a small dictionary
        "kind": pa.array([None if i % 13 == 0 else ["view", "click", "buy"][i % 3] for i in ids], pa.string()),
        # all distinct and long: the writer's dictionary overflows, pages fall back to plain
        "note": pa.array([f"note-{i:08d}-" + "x" * (i % 50) for i in ids], pa.string()),
        "blob": pa.array([bytes([i % 256]) * (i % 5) if i % 17 else None for i in ids], pa.binary()),
        "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
        "day": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i % 400) for i in ids], pa.date32()),
        "at": pa.array([dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
        "at_utc": pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
                           pa.timestamp("us", tz="UTC")),
        "ok": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
        "tags": pa.array([[f"t{i % 3}", f"u{i % 5}"] if i % 19 else None for i in ids], pa.list_(pa.string())),
        "pt": pa.array([{"a": i, "b": f"p{i % 4}"} for i in ids],
                       pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])),
    }
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


def _make(warehouse: Path) -> dict[str, int]:
    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("ns")
        schema = _batch(0, pa.schema([pa.field(n, t) for n, t in [
            ("id", pa.int64()), ("small", pa.int32()), ("ratio", pa.float64()), ("kind", pa.string()),
            ("note", pa.string()), ("blob", pa.binary()), ("price", pa.decimal128(12, 2)), ("day", pa.date32()),
            ("at", pa.timestamp("us")), ("at_utc", pa.timestamp("us", tz="UTC")), ("ok", pa.bool_()),
            ("tags", pa.list_(pa.string())),
            ("pt", pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])),
        ]])).schema
        table = cat.create_table("ns.wide", schema)
        for i in range(3):
            table = cat.load_table("ns.wide")
            table.append(_batch(i * ROWS, schema))
        snapshots = {"wide_first": cat.load_table("ns.wide").metadata.snapshots[0].snapshot_id}
        # Schema evolution: files written before a rename and an added column (two layouts).
        flat = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("note", pa.string())])
        evolved = cat.create_table("ns.evolved", flat)
        evolved.append(_batch(0, flat))
        with cat.load_table("ns.evolved").update_schema() as update:
            from pyiceberg.types import StringType

            update.rename_column("kind", "category")
            update.add_column("extra", StringType())
        evolved = cat.load_table("ns.evolved")
        later = _batch(ROWS, flat).rename_columns(["id", "category", "note"])
        later = later.append_column("extra", pa.array([["e1", None, "e2"][i % 3] for i in range(ROWS)]))
        evolved.append(later.cast(evolved.schema().as_arrow()))
        return snapshots
    finally:
        cat.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, int]]]:
    warehouse = tmp_path_factory.mktemp("plain") / "warehouse"
    snapshots = _make(warehouse)
    with serving(warehouse) as proc:
        yield proc, snapshots
    assert "Traceback" not in proc.log, proc.log


def _read(location: str, sql: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[pa.Schema, pa.Table]:
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(headers=headers or [])
        info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)), options)
        tables = [client.do_get(e.ticket).read_all() for e in info.endpoints]
        for table in tables:
            assert table.schema.equals(info.schema, check_metadata=True), "DoGet answers GetFlightInfo's schema"
        return info.schema, pa.concat_tables(tables)
    finally:
        client.close()


@pytest.mark.parametrize("table, columns", [
    ("ns.wide", "*"),
    ("ns.wide", "note, kind, id"),
    ("ns.wide", "tags, pt, at_utc, price, blob"),
    ("ns.evolved", "*"),
    ("ns.evolved", "category, extra"),
])
def test_plain_scan_equals_the_sandboxed_query(made: tuple[ServerProcess, dict[str, int]], table: str,
                                               columns: str) -> None:
    server, _ = made
    schema, plain = _read(server.location, f"SELECT {columns} FROM {table}")
    # The same rows through DuckDB in the sandbox (a subquery is no plain scan).
    other_schema, engine = _read(server.location, f"SELECT * FROM (SELECT {columns} FROM {table}) AS q")
    assert schema.remove_metadata().equals(other_schema.remove_metadata())
    assert plain.schema.remove_metadata().equals(engine.schema.remove_metadata())
    assert plain.num_rows == engine.num_rows > 0
    assert plain.to_pylist() == engine.to_pylist(), "same values, nulls and order"


def test_plain_scan_of_evolved_table_fills_added_columns_with_nulls(made: tuple[ServerProcess, dict[str, int]]) -> None:
    server, _ = made
    _, table = _read(server.location, "SELECT id, category, extra FROM ns.evolved")
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert len(rows) == 2 * ROWS
    assert all(r["extra"] is None for r in rows[:ROWS]), "files from before the column was added"
    assert [r["extra"] for r in rows[ROWS:ROWS + 3]] == ["e1", None, "e2"]
    assert rows[1]["category"] == "click" and rows[0]["category"] is None  # 0 % 13 == 0: a null


def test_plain_scan_at_an_older_snapshot_and_split(made: tuple[ServerProcess, dict[str, int]]) -> None:
    server, snapshots = made
    _, old = _read(server.location, f"SELECT * FROM ns.wide AT (VERSION => {snapshots['wide_first']})")
    assert old.num_rows == ROWS
    _, whole = _read(server.location, "SELECT * FROM ns.wide")
    split_headers = [(b"icefloe.scan.target-partition-bytes", b"1"), (b"icefloe.scan.max-partitions", b"3")]
    _, parts = _read(server.location, "SELECT * FROM ns.wide", split_headers)
    assert sorted(parts.to_pylist(), key=lambda r: r["id"]) == sorted(whole.to_pylist(), key=lambda r: r["id"])


def test_dictionary_columns_are_the_small_dictionary_string_columns(tmp_path: Path) -> None:
    n = 50_000
    table = pa.table({
        "few": pa.array([["a", "b", None][i % 3] for i in range(n)]),
        "many": pa.array([f"value-{i:010d}-" + "p" * 64 for i in range(n)]),
        "plain": pa.array([["x", "y"][i % 2] for i in range(n)]),
        "number": pa.array(range(n), pa.int64()),
    })
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=20_000, use_dictionary=["few", "many", "number"])
    meta = pq.read_metadata(path)
    assert meta.num_row_groups == 3
    # "many" overflows the 1 MiB dictionary limit and falls back to plain pages; "plain" has
    # no dictionary; "number" is no string.
    assert dictionary_columns(meta, pq.read_schema(path)) == frozenset({"few"})
    assert dictionary_columns(pq.read_metadata(tmp_path / "f.parquet"), pa.schema([])) == frozenset()


def test_an_empty_table_with_uuids_inside_lists_maps_and_structs_answers_its_schema(tmp_path: Path) -> None:
    """An empty table (no snapshot) whose uuid columns sit inside a list, a map and a struct:
    ``SELECT *`` answers its schema and no rows (it was INTERNAL: pyarrow's ``empty_table``
    cannot build a nested uuid; the Spark source hit it asking for a write target's schema)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, MapType, NestedField, StringType, StructType, UUIDType

    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    cat = RocksCatalog("t", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.nested_uuids", Schema(
        NestedField(1, "k", LongType()),
        NestedField(2, "ids", ListType(3, UUIDType(), element_required=False)),
        NestedField(4, "by_name", MapType(5, StringType(), 6, UUIDType(), value_required=False)),
        NestedField(7, "owner", StructType(NestedField(8, "id", UUIDType()))),
    ))
    cat.close()
    with serving(warehouse) as proc:
        client = flight.FlightClient(proc.location)
        try:
            descriptor = flight.FlightDescriptor.for_command(statement_query("SELECT * FROM ns.nested_uuids"))
            info = client.get_flight_info(descriptor)
            assert info.schema.names == ["k", "ids", "by_name", "owner"]
            assert sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints) == 0
        finally:
            client.close()
