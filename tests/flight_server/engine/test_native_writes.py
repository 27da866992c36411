"""The reads of SQL writes (``engine/native_writes.py``): a slot made for an earlier snapshot
serving the next statement, and deleted positions as a filter in the scan
(``deleted_rows.range_predicate``). In-process, a real ``RocksCatalog`` and ``Engine``."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from row_deletes_support import data_files, position_delete

from catalog import RocksCatalog
from catalog.sandbox import OutsideTableError
from flight_server.engine import Engine, deleted_rows, native_writes


def _slot_files(engine: Engine) -> set[str]:
    return {f for slot in engine.slots._free for f in slot.files}


def _real_files(table: Any) -> set[str]:
    return {os.path.realpath(p.removeprefix("file://")) for p, _ in data_files(table)}


def test_a_slot_of_an_earlier_snapshot_serves_the_next_write_and_reads_nothing_else(
        lake: tuple[RocksCatalog, Engine], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An UPDATE or MERGE adds a data file, so the next statement's snapshot has a file the
    last statement's slot may not read (DuckDB cannot widen a running database's allowed
    paths). That slot is reused: the new file is read as an Arrow table (by field id, its
    deletes applied, sandbox-checked), and the slot's own wall is unchanged."""
    catalog, engine = lake
    monkeypatch.setattr(native_writes, "_MIN_NATIVE_BYTES", 0)  # these files are small
    schema = pa.schema([("id", pa.int64()), ("k", pa.string()), ("c", pa.decimal128(9, 2))])
    t = catalog.create_table("ns.u", schema=schema)
    for start in (0, 100):
        t.append(pa.table({"id": pa.array(range(start, start + 100), pa.int64()),
                           "k": [f"k{i}" for i in range(start, start + 100)],
                           "c": pa.array([Decimal(i) / 4 for i in range(start, start + 100)], pa.decimal128(9, 2))}))
    old = [p for p, _ in data_files(catalog.load_table("ns.u"))]

    def read(paths: list[str], columns: str = "id, k") -> list[dict[str, Any]]:
        sql, pins = engine.plan(f"SELECT __icefloe_file AS f, __icefloe_pos AS p, {columns} FROM ns.u", None)
        got = engine.query_table(sql, pins, None, file_tags={(("ns",), "u"): paths}, file_positions=True)
        return sorted(got.to_pylist(), key=lambda r: (r["f"], r["p"]))

    assert len(read(old)) == 200
    made, slot_files = engine.slots._made, _slot_files(engine)
    assert slot_files == _real_files(catalog.load_table("ns.u"))
    # The next snapshot: a renamed column (files match by field id) and a new file, one of its
    # rows deleted by position.
    with catalog.load_table("ns.u").update_schema() as update:
        update.rename_column("k", "kk")
    catalog.load_table("ns.u").append(pa.table({
        "id": pa.array(range(200, 210), pa.int64()), "kk": [f"n{i}" for i in range(10)],
        "c": pa.array([Decimal("0.25")] * 10, pa.decimal128(9, 2))}))
    new = next(p for p, _ in data_files(catalog.load_table("ns.u")) if p not in old)
    position_delete(catalog.load_table("ns.u"), {new: [3]})
    expected = [{"f": 0, "p": p, "id": 200 + p, "kk": f"n{p}", "c": Decimal("0.25")} for p in range(10) if p != 3]
    first = pq.read_table(old[1].removeprefix("file://")).column("id")[0].as_py()
    expected += [{"f": 1, "p": p, "id": first + p, "kk": f"k{first + p}", "c": Decimal(first + p) / 4}
                 for p in range(100)]
    assert read([new, old[1]], "id, kk, c") == expected
    assert engine.slots._made == made and _slot_files(engine) == slot_files  # the same slot, no new file in it
    real_new = os.path.realpath(new.removeprefix("file://"))
    assert real_new not in slot_files
    # Its wall: the new file and a file outside the warehouse stay unreadable to DuckDB itself.
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"x": [1]}), outside)
    slot = next(s for s in engine.slots._free if s.files)
    for path in (real_new, str(outside)):
        with pytest.raises(duckdb.PermissionException):
            slot.db.execute(f"SELECT * FROM read_parquet('{path}')")
    # The same files beside the same slot a second time (statements reading them again, such
    # as scattered DELETEs): a new slot for the whole snapshot, which later reads reuse.
    assert read([new, old[1]], "id, kk, c") == expected
    assert engine.slots._made == made + 1 and real_new in engine.slots._free[-1].files
    assert read([new, old[1]], "id, kk, c") == expected
    assert engine.slots._made == made + 1
    # Past the bounds on such files, or with equality delete files the slot may not read, too.
    slot_for = native_writes._slot_for
    few, every = frozenset({"/w/a"}), frozenset({"/w/a", "/w/b", "/w/eq"})
    assert slot_for(few, every, ["/w/a", "/w/b"], [10, 10], []) == (few, {1})
    assert slot_for(few, every, ["/w/a", "/w/b"], [10, 10], ["/w/eq"]) == (every, set())
    assert slot_for(few, every, ["/w/a", "/w/b"], [10, 33 << 20], []) == (every, set())
    monkeypatch.setattr(native_writes, "_UNLISTED_FILES", 0)
    assert slot_for(few, every, ["/w/a", "/w/b"], [10, 10], []) == (every, set())
    monkeypatch.setattr(native_writes, "_UNLISTED_FILES", 16)
    # A later file that leads outside the warehouse is refused before any read.
    catalog.load_table("ns.u").append(pa.table({"id": pa.array([300], pa.int64()), "kk": ["x"],
                                                "c": pa.array([Decimal(1)], pa.decimal128(9, 2))}))
    hostile = next(p for p, _ in data_files(catalog.load_table("ns.u")) if p not in (*old, new))
    secret = tmp_path / "secret.parquet"
    pq.write_table(pq.read_table(hostile.removeprefix("file://")), secret)
    os.remove(hostile.removeprefix("file://"))
    os.symlink(secret, hostile.removeprefix("file://"))
    with pytest.raises(OutsideTableError):
        read([hostile, old[0]], "id, kk")


def test_deleted_positions_as_runs_match_the_rows_they_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan filter of a file's deleted positions, built per delete file's array and merged
    (runs of two arrays that touch or overlap are one), keeps exactly the other rows; too many
    runs answer None (the caller anti-joins)."""
    rng = np.random.default_rng(38)
    con = duckdb.connect()
    cases = [
        [np.arange(10, 20), np.arange(20, 25)],  # touching: one run
        [np.arange(0, 50), np.arange(30, 60), np.array([99])],  # overlapping, and a single row
        [np.array([7, 3, 3, 5])],  # unsorted with a repeat (made sorted and distinct)
        [np.sort(rng.choice(1000, 20, replace=False)), np.arange(500, 700)],
        [],
    ]
    for arrays in cases:
        arrays = [a.astype(np.int64) for a in arrays]
        where = deleted_rows.range_predicate(arrays)
        assert where is not None
        gone = set(np.concatenate(arrays).tolist()) if arrays else set()
        sql = "SELECT file_row_number FROM (SELECT range AS file_row_number FROM range(1000)) AS d"
        kept = {r for (r,) in con.execute(sql + (f" WHERE {where}" if where else "")).fetchall()}
        assert kept == set(range(1000)) - gone
    assert deleted_rows.range_predicate([np.arange(0, 200, 2, dtype=np.int64)]) is None
    monkeypatch.setattr(deleted_rows, "_RANGE_FILTER_RUNS", 2)
    assert deleted_rows.range_predicate([np.array([1, 5, 9], np.int64)]) is None
    assert deleted_rows.range_predicate([np.array([1, 5], np.int64), np.array([2, 3, 4], np.int64)]) is not None
