"""Bound result schemas are remembered (``engine.bound``): a GetFlightInfo repeated, and the
DoGet of a plain scan after its GetFlightInfo, run no DuckDB statement to learn the types, and
the answer follows the tables (schema changes, a table dropped and made again, the default
schema). Real catalog and engine, in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from engine_slots import kept_cursor
from pyiceberg.types import StringType

from catalog import RocksCatalog
from flight_server.engine import Engine


@pytest.fixture
def cat(tmp_path: Path) -> Any:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    catalog.create_namespace("ns")
    catalog.create_namespace("other")
    table = catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    yield catalog
    catalog.close()


@pytest.fixture
def engine(cat: Any) -> Any:
    engine = Engine(cat, query_timeout_s=5, max_concurrent=1)
    yield engine
    engine.close()



def _describe(engine: Engine, sql: str, default_schema: tuple[str, ...] | None = None) -> pa.Schema:
    planned, pins = engine.plan(sql, default_schema)
    return engine.describe(planned, pins, default_schema)[0]


def _execute(engine: Engine, sql: str, default_schema: tuple[str, ...] | None = None) -> pa.Table:
    planned, pins = engine.plan(sql, default_schema)
    engine.describe(planned, pins, default_schema)  # as GetFlightInfo does before the DoGet
    reader = engine.execute(planned, pins, default_schema)
    try:
        return reader.read_all()
    finally:
        del reader  # its slot goes back when the reader is dropped


def test_a_plain_scan_after_its_describe_registers_nothing(engine: Engine) -> None:
    assert _execute(engine, "SELECT * FROM ns.t").column("id").to_pylist() == [1, 2, 3]
    # The DoGet streamed the table's files with no source registered and no view made on its
    # cursor, so the cursor is still clean and kept; the full path would have closed it.
    kept = kept_cursor(engine)
    assert kept is not None
    assert _execute(engine, "SELECT * FROM ns.t").column("id").to_pylist() == [1, 2, 3]
    assert kept_cursor(engine) is kept  # the describe, remembered, took no cursor either
    assert _execute(engine, "SELECT id AS x FROM ns.t").column("x").to_pylist() == [1, 2, 3]
    # A query that is no plain scan still runs in DuckDB, on the sources it registers.
    assert _execute(engine, "SELECT sum(id) AS s FROM ns.t").column("s").to_pylist() == [6]
    assert kept_cursor(engine) is None


def test_the_remembered_schema_follows_the_table(engine: Engine, cat: Any) -> None:
    assert _describe(engine, "SELECT * FROM ns.t").names == ["id"]
    with cat.load_table("ns.t").update_schema() as update:
        update.add_column("label", StringType())
    assert _describe(engine, "SELECT * FROM ns.t").names == ["id", "label"]
    assert _execute(engine, "SELECT * FROM ns.t").to_pylist() == [
        {"id": 1, "label": None}, {"id": 2, "label": None}, {"id": 3, "label": None}]
    # dropped and made again: the same name and schema id, other columns
    cat.drop_table("ns.t")
    table = cat.create_table("ns.t", pa.schema([("name", pa.string()), ("n", pa.int32())]))
    table.append(pa.table({"name": ["a"], "n": pa.array([7], pa.int32())}))
    schema = _describe(engine, "SELECT * FROM ns.t")
    assert [(f.name, f.type) for f in schema] == [("name", pa.utf8()), ("n", pa.int32())]
    assert _execute(engine, "SELECT * FROM ns.t").to_pylist() == [{"name": "a", "n": 7}]


def test_the_same_text_under_another_default_schema_is_another_query(engine: Engine, cat: Any) -> None:
    cat.create_table("other.t", pa.schema([("word", pa.string())])).append(pa.table({"word": ["hi"]}))
    assert _describe(engine, "SELECT * FROM t", ("ns",)).names == ["id"]
    assert _describe(engine, "SELECT * FROM t", ("other",)).names == ["word"]
    assert _execute(engine, "SELECT * FROM t", ("other",)).to_pylist() == [{"word": "hi"}]
    assert _execute(engine, "SELECT * FROM t", ("ns",)).column("id").to_pylist() == [1, 2, 3]


def test_metadata_tables_and_parameters_are_bound_each_time(engine: Engine) -> None:
    planned, pins = engine.plan('SELECT snapshot_id FROM ns."t$snapshots"', None)
    assert engine.bound.key(planned, None, pins) is None
    assert engine.describe(planned, pins, None)[0].names == ["snapshot_id"]
    planned, pins = engine.plan("SELECT id + ? AS x FROM ns.t", None)
    assert engine.describe(planned, pins, None, [1])[0].names == ["x"]
    assert engine.bound.get(engine.bound.key(planned, None, pins)) is None
