"""Change scans read runs of appended files with one Arrow dataset scan each
(``flight_server.appended_files``): the rows in commit order with their own commit columns,
columns matched by field id through schema changes, and what that path does not read exactly
(nested columns, files without field ids) still read right. Real catalog, in process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from catalog import RocksCatalog
from flight_server import errors
from flight_server.changes import ChangeRequest, read_changes


@pytest.fixture
def cat(tmp_path: Path) -> Any:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})
    catalog.create_namespace("ns")
    yield catalog
    catalog.close()


def _changes(cat: Any, after: int = 0, until: int | None = None) -> pa.Table:
    head = cat.log.head() if until is None else until
    return read_changes(cat, ChangeRequest(("ns",), "t", after, head)).read_all()


def _commits(cat: Any) -> dict[int, tuple[str, int | None]]:
    return {r.seq: (r.operation, r.snapshot_id) for r in cat.log.read(0, limit=10_000)}


def test_rows_come_in_commit_order_each_with_its_own_commit(cat: Any) -> None:
    cat.create_table("ns.t", pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())]))
    sizes = [3, 1, 250_000, 7, 2, 130_000, 5] + [1] * 20  # two appends span several batches
    start = 0
    for n in sizes:
        ids = pa.array(range(start, start + n), pa.int64())
        cat.load_table("ns.t").append(pa.table({"id": ids, "s": pa.array([f"v{i % 3}" for i in range(n)])}))
        start += n
    out = _changes(cat)
    # not sorted: the stream itself is in commit order, and within a commit in file order
    assert out.column("id").to_pylist() == list(range(start))
    assert out.column("s").to_pylist() == [f"v{i % 3}" for n in sizes for i in range(n)]
    commits = _commits(cat)
    appends = [seq for seq, (op, _) in sorted(commits.items()) if op == "append"]
    expected_seq = [seq for seq, n in zip(appends, sizes, strict=True) for _ in range(n)]
    assert out.column("_seq").to_pylist() == expected_seq
    assert out.column("_snapshot_id").to_pylist() == [commits[s][1] for s in expected_seq]
    assert set(out.column("_operation").to_pylist()) == {"append"}
    # a range in the middle: exactly its commits
    middle = _changes(cat, appends[1], appends[5])
    assert middle.num_rows == sum(sizes[2:6])
    assert middle.column("id")[0].as_py() == sum(sizes[:2])


def test_columns_follow_their_field_ids_through_schema_changes(cat: Any) -> None:
    from pyiceberg.types import IntegerType

    table = cat.create_table("ns.t", pa.schema([pa.field("a", pa.int32()), pa.field("s", pa.string()),
                                                pa.field("gone", pa.string())]))
    assert table.schema().find_field("a").field_type == IntegerType()
    table.append(pa.table({"a": pa.array([1, 2], pa.int32()), "s": ["x", "y"], "gone": ["g", "h"]}))
    with cat.load_table("ns.t").update_schema() as update:
        update.update_column("a", field_type=LongType())  # int -> long
        update.rename_column("s", "label")
        update.add_column("z", DoubleType())
        update.delete_column("gone")
        update.move_first("z")
    cat.load_table("ns.t").append(pa.table({"z": [1.5], "a": pa.array([3], pa.int64()), "label": ["w"]}))
    out = _changes(cat)
    assert out.schema.names == ["z", "a", "label", "_seq", "_snapshot_id", "_operation"]
    assert out.schema.field("a").type == pa.int64()
    assert out.select(["z", "a", "label"]).to_pylist() == [
        {"z": None, "a": 1, "label": "x"}, {"z": None, "a": 2, "label": "y"}, {"z": 1.5, "a": 3, "label": "w"}]
    # the same values pyiceberg's own reader gives for the table's rows
    reference = cat.load_table("ns.t").scan().to_arrow().sort_by("a")
    assert out.select(["z", "a", "label"]).to_pylist() == reference.select(["z", "a", "label"]).to_pylist()


def test_nested_columns_and_files_without_field_ids_read_right(cat: Any, tmp_path: Path) -> None:
    point = pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.int64())])
    cat.create_table("ns.t", pa.schema([pa.field("id", pa.int64()), pa.field("p", point)]))
    cat.load_table("ns.t").append(pa.table({"id": pa.array([1], pa.int64()),
                                            "p": pa.array([{"x": 1, "y": 2}], point)}))
    with cat.load_table("ns.t").update_schema() as update:
        update.rename_column("p.y", "why")
    renamed = pa.struct([pa.field("x", pa.int64()), pa.field("why", pa.int64())])
    cat.load_table("ns.t").append(pa.table({"id": pa.array([2], pa.int64()),
                                            "p": pa.array([{"x": 3, "why": 4}], renamed)}))
    # read with the newest schema the range wrote: the older file's p.y is p.why by its id
    assert _changes(cat).select(["id", "p"]).to_pylist() == [{"id": 1, "p": {"x": 1, "why": 2}},
                                                             {"id": 2, "p": {"x": 3, "why": 4}}]

    cat.create_table("ns.plain", pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())]))
    plain = cat.load_table("ns.plain")
    # Written by another tool (no field ids: read by name mapping), inside the table's own
    # folder, where add_files may take it from (catalog.sandbox refuses files elsewhere).
    foreign = Path(plain.location().removeprefix("file://")) / "data" / "foreign.parquet"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64()), "s": ["p", "q"]}), foreign)
    plain.append(pa.table({"id": pa.array([6], pa.int64()), "s": ["o"]}))
    cat.load_table("ns.plain").add_files([str(foreign)])
    out = read_changes(cat, ChangeRequest(("ns",), "plain", 0, cat.log.head())).read_all()
    assert out.select(["id", "s"]).to_pylist() == [{"id": 6, "s": "o"}, {"id": 7, "s": "p"}, {"id": 8, "s": "q"}]


def test_a_file_gone_after_planning_is_cursor_expired_at_its_commit(cat: Any) -> None:
    cat.create_table("ns.t", pa.schema([pa.field("id", pa.int64())]))
    for i in range(6):
        cat.load_table("ns.t").append(pa.table({"id": pa.array([i], pa.int64())}))
    appends = [seq for seq, (op, _) in sorted(_commits(cat).items()) if op == "append"]
    reader = read_changes(cat, ChangeRequest(("ns",), "t", 0, cat.log.head()))  # planned
    table = cat.load_table("ns.t")
    victim = next(t.file.file_path for t in table.scan().plan_files() if _only_value(t.file.file_path) == 3)
    os.remove(victim.removeprefix("file://"))
    with pytest.raises(errors.OutOfRange, match=f"cursor expired: the rows of seq {appends[3]} "):
        reader.read_all()


def _only_value(uri: str) -> int:
    return int(pq.read_table(uri.removeprefix("file://")).column(0)[0].as_py())


def test_string_type_of_the_output_is_the_tables(cat: Any) -> None:
    # a table created with StringType reads as utf8 (32-bit offsets), like the SQL engine's
    table = cat.create_table("ns.t", schema=_iceberg_schema())
    table.append(pa.table({"id": pa.array([1], pa.int64()), "s": pa.array(["a"], pa.large_string())}))
    out = _changes(cat)
    assert out.schema.field("s").type == pa.utf8()
    assert out.column("s").to_pylist() == ["a"]


def _iceberg_schema() -> Any:
    from pyiceberg.schema import Schema

    return Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))


def test_plain_appends_take_one_dataset_scan_not_a_pyiceberg_read_per_file(
    cat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyiceberg's ArrowScan cost ~2 ms of Python per file: a change scan of 100 ten-row appends
    # took 2.9x the SELECT of the same files (bench_change_scan). Counted, not timed.
    from pyiceberg.io.pyarrow import ArrowScan

    calls: list[int] = []
    original = ArrowScan.to_record_batches

    def counting(self: ArrowScan, tasks: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(list(tasks)))
        return original(self, tasks, *args, **kwargs)

    monkeypatch.setattr(ArrowScan, "to_record_batches", counting)
    cat.create_table("ns.t", pa.schema([pa.field("id", pa.int64())]))
    for i in range(12):
        cat.load_table("ns.t").append(pa.table({"id": pa.array([i], pa.int64())}))
    assert _changes(cat).column("id").to_pylist() == list(range(12))
    assert calls == []
    # a nested column: pyiceberg's reader, which maps ids inside structs
    point = pa.struct([pa.field("x", pa.int64())])
    cat.create_table("ns.nested", pa.schema([pa.field("p", point)]))
    cat.load_table("ns.nested").append(pa.table({"p": pa.array([{"x": 1}], point)}))
    nested = read_changes(cat, ChangeRequest(("ns",), "nested", 0, cat.log.head())).read_all()
    assert nested.column("p").to_pylist() == [{"x": 1}]
    assert calls == [1]
