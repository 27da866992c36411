"""The native scan path (``engine/native_tables.py``): DuckDB's own Parquet reader over exactly
the pinned, sandbox-checked files, in a slot that can read nothing else.

In-process tests use a real ``RocksCatalog`` and ``Engine`` (the slot a query ran in is
inspected afterwards); the policy test runs a real server and a real ADBC client.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import DecimalType, DoubleType, LongType, StringType, StructType
from row_deletes_support import data_files, equality_delete, position_delete
from servers import ServerProcess

from catalog import RocksCatalog
from catalog.lru import LockedLRU
from catalog.sandbox import OutsideTableError
from flight_server.engine import Engine, deleted_rows, native_tables, native_writes
from flight_server.engine import engine as engine_module


def _run(engine: Engine, sql: str) -> pa.Table:
    planned, pins = engine.plan(sql, None)
    return engine.query_table(planned, pins, None)


def _slot_files(engine: Engine) -> set[str]:
    """Every file some free slot of the engine may read (the slots the queries ran in)."""
    return {f for slot in engine.slots._free for f in slot.files}


def _real_files(table: Any) -> set[str]:
    return {os.path.realpath(p.removeprefix("file://")) for p, _ in data_files(table)}


def test_joins_read_the_pinned_files_natively_and_nothing_else(lake: tuple[RocksCatalog, Engine],
                                                                tmp_path: Path) -> None:
    catalog, engine = lake
    t = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64()), ("g", pa.string())]))
    t.append(pa.table({"id": list(range(100)), "g": [f"g{i % 3}" for i in range(100)]}))
    t.append(pa.table({"id": list(range(100, 150)), "g": ["g0"] * 50}))
    other = catalog.create_table("ns.other", schema=pa.schema([("id", pa.int64())]))
    other.append(pa.table({"id": [1, 2, 3]}))
    got = _run(engine, "SELECT t.g, count(*) AS n FROM ns.t t JOIN ns.t u ON t.id = u.id GROUP BY t.g ORDER BY t.g")
    assert got.to_pylist() == [{"g": "g0", "n": 84}, {"g": "g1", "n": 33}, {"g": "g2", "n": 33}]
    t = catalog.load_table("ns.t")
    assert _slot_files(engine) == _real_files(t)
    # A plan of read_parquet lists its files: the server's paths never reach the client.
    for explain in ("EXPLAIN", "EXPLAIN ANALYZE"):
        plan = str(_run(engine, f"{explain} SELECT count(*) FROM ns.t t JOIN ns.t u ON t.id = u.id").to_pylist())
        assert "READ_PARQUET" in plan.upper() and str(tmp_path) not in plan and ".parquet" not in plan
    # The wall itself, with the policy out of the way: the slot's own connection can read no
    # other file, and cannot widen what it may read.
    slot = next(s for s in engine.slots._free if s.files)
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"x": [1]}), outside)
    for path in [str(outside), *_real_files(catalog.load_table("ns.other")), t.metadata_location]:
        with pytest.raises(duckdb.PermissionException):
            slot.db.execute(f"SELECT * FROM read_parquet('{path.removeprefix('file://')}')")
    for statement in ["SET allowed_paths = ['/']", "SET allowed_directories = ['/']",
                      "SET enable_external_access = true", "RESET allowed_paths", "SET lock_configuration = false"]:
        with pytest.raises(duckdb.Error):
            slot.db.execute(statement)
    with pytest.raises(duckdb.PermissionException):
        slot.db.execute(f"SELECT * FROM glob('{Path(next(iter(slot.files))).parent}/*')")


def test_renamed_added_dropped_and_promoted_columns(lake: tuple[RocksCatalog, Engine]) -> None:
    catalog, engine = lake
    schema = pa.schema([("a", pa.int32()), ("b", pa.float32()), ("c", pa.decimal128(9, 2)), ("d", pa.string()),
                        ("gone", pa.string())])
    t = catalog.create_table("ns.evolve", schema=schema)
    t.append(pa.table({"a": pa.array([1, 2], pa.int32()), "b": pa.array([0.5, 1.5], pa.float32()),
                       "c": pa.array([Decimal("1.25"), Decimal("2.50")], pa.decimal128(9, 2)),
                       "d": ["x", "y"], "gone": ["p", "q"]}))
    with t.update_schema() as update:
        update.rename_column("d", "name")
        update.update_column("a", field_type=LongType())
        update.update_column("b", field_type=DoubleType())
        update.update_column("c", field_type=DecimalType(18, 2))
        update.delete_column("gone")
        update.add_column("e", StringType())
        update.add_column("gone", LongType())  # a new column with a dropped one's name: not its values
    t = catalog.load_table("ns.evolve")
    t.append(pa.table({"a": pa.array([3_000_000_000], pa.int64()), "b": [2.25],
                       "c": pa.array([Decimal("1234567890.12")], pa.decimal128(18, 2)),
                       "name": ["z"], "e": ["new"], "gone": pa.array([7], pa.int64())}))
    got = _run(engine, "SELECT a, b, c, name, e, gone FROM ns.evolve WHERE a > 0 ORDER BY a")
    assert got.schema.field("a").type == pa.int64() and got.schema.field("b").type == pa.float64()
    assert got.schema.field("c").type == pa.decimal128(18, 2)
    assert got.to_pylist() == [
        {"a": 1, "b": 0.5, "c": Decimal("1.25"), "name": "x", "e": None, "gone": None},
        {"a": 2, "b": 1.5, "c": Decimal("2.50"), "name": "y", "e": None, "gone": None},
        {"a": 3_000_000_000, "b": 2.25, "c": Decimal("1234567890.12"), "name": "z", "e": "new", "gone": 7},
    ]
    assert _slot_files(engine) == _real_files(t)


def test_position_and_equality_deletes_are_anti_joins(lake: tuple[RocksCatalog, Engine]) -> None:
    catalog, engine = lake
    t = catalog.create_table("ns.del", schema=pa.schema([("id", pa.int64()), ("k", pa.string())]))
    t.append(pa.table({"id": list(range(10)), "k": ["a", "b", None, "c", "a", None, "d", "e", "f", "g"]}))
    first = data_files(t)[0][0]
    position_delete(t, {first: [0, 9]})  # ids 0 and 9
    t = catalog.load_table("ns.del")
    before_eq = t.current_snapshot().snapshot_id
    equality_delete(t, {"k": [None, "c"]})  # NULL matches NULL: ids 2, 5; and id 3
    t = catalog.load_table("ns.del")
    # Written after the equality delete: a smaller sequence number is not deleted by it.
    t.append(pa.table({"id": [20, 21], "k": ["c", None]}))
    t = catalog.load_table("ns.del")
    got = _run(engine, "SELECT id FROM ns.del WHERE id >= 0 ORDER BY id")
    assert got.column("id").to_pylist() == [1, 4, 6, 7, 8, 20, 21]
    earlier = _run(engine, f"SELECT id FROM ns.del AT (VERSION => {before_eq}) WHERE id >= 0 ORDER BY id")
    assert earlier.column("id").to_pylist() == [1, 2, 3, 4, 5, 6, 7, 8]
    equality_paths = {os.path.realpath(p) for p in _delete_files(t, content=2)}
    position_paths = {os.path.realpath(p) for p in _delete_files(t, content=1)}
    assert equality_paths and equality_paths <= _slot_files(engine)
    # Positions 0 and 9 are a filter pushed into the scan: the slot never reads their file.
    assert position_paths and not position_paths & _slot_files(engine)
    view = engine.natives.native_table(t, t.current_snapshot().snapshot_id, t.schema())
    assert view is not None and "WHERE d.file_row_number <> 0 AND d.file_row_number <> 9" in view.select


@pytest.mark.parametrize("scattered", [False, True], ids=["few-runs", "scattered"])
@pytest.mark.parametrize("file_scoped", [False, True], ids=["shared", "file-scoped"])
def test_position_delete_files_over_several_data_files(lake: tuple[RocksCatalog, Engine], file_scoped: bool,
                                                       scattered: bool) -> None:
    catalog, engine = lake
    t = catalog.create_table("ns.multi", schema=pa.schema([("id", pa.int64())]))
    for start in (0, 100, 200):
        t.append(pa.table({"id": pa.array(range(start, start + 100), pa.int64())}))
    files = [p for p, _ in data_files(catalog.load_table("ns.multi"))]
    by_start = {pq.read_table(p.removeprefix("file://")).column("id")[0].as_py(): p for p in files}
    # Of the first and third files (none of the second): two runs each (5, 7 / 5, 98-99), or
    # every other row (50 runs each: too many for a filter, an anti-join on the row number).
    first, third = ([5, 7], [5, 98, 99]) if not scattered else (list(range(0, 100, 2)), list(range(1, 100, 2)))
    if file_scoped:  # one delete file per data file, each naming only its own
        position_delete(catalog.load_table("ns.multi"), {by_start[0]: first}, file_scoped=True)
        position_delete(catalog.load_table("ns.multi"), {by_start[200]: third}, file_scoped=True)
    else:  # one delete file over the partition: it applies to all three files
        position_delete(catalog.load_table("ns.multi"), {by_start[0]: first, by_start[200]: third})
    gone = len(first) + len(third), sum(first) + sum(200 + p for p in third)
    got = _run(engine, "SELECT count(*) AS n, sum(id) AS s FROM ns.multi WHERE id >= 0")
    assert got.to_pylist() == [{"n": 300 - gone[0], "s": sum(range(300)) - gone[1]}]
    assert _slot_files(engine) >= _real_files(catalog.load_table("ns.multi"))
    # Written after the delete (a larger sequence number): no delete file applies to it.
    catalog.load_table("ns.multi").append(pa.table({"id": pa.array(range(300, 310), pa.int64())}))
    got = _run(engine, "SELECT count(*) AS n, sum(id) AS s FROM ns.multi WHERE id >= 0")
    assert got.to_pylist() == [{"n": 310 - gone[0], "s": sum(range(310)) - gone[1]}]
    t = catalog.load_table("ns.multi")
    view = engine.natives.native_table(t, t.current_snapshot().snapshot_id, t.schema())
    assert view is not None
    reads = view.select.split(" UNION ALL ")
    plain = [r for r in reads if "file_row_number" not in r]
    # The files no delete applies to (the second, whose rows a shared file's bounds take in but
    # which it names none of; the newest): no join, no filter.
    assert len(plain) == (1 if file_scoped else 2)
    if not scattered:  # each file's runs are a filter in its scan: no join, no delete file read
        assert len(reads) - len(plain) == 2 and all("ANTI JOIN" not in r for r in reads)
        assert "WHERE d.file_row_number <> 5 AND d.file_row_number NOT BETWEEN 98 AND 99" in view.select
        assert not view.registered
    else:  # one read of both, joined against the positions parsed once, whatever the scope
        [joined] = [r for r in reads if "file_row_number" in r]
        [kept] = view.kept  # a table the slot keeps across queries; nothing registered per query
        assert f'JOIN memory.main."{kept.name}" AS pd ON d.file_index = pd.i' in joined
        assert "WHERE get_bit(pd.b, CAST(d.file_row_number AS INTEGER)) = 0" in joined
        assert "deletes" not in joined  # no delete file is read by the query
        assert not view.registered
        bits = kept.make()  # one row per file: a bit per row, set where deleted
        assert kept.name.startswith(native_tables.KEPT_PREFIX) and bits.num_rows == 2
        assert bits.schema.field("i").type == pa.uint64()  # as file_index: no cast in the join
        assert sorted(bits.column("b").to_pylist()) == ["01" * 50, "10" * 50]
        # A position outside the file (a malformed delete file) deletes nothing, as in the join.
        odd = deleted_rows.deleted_bits([np.array([1, 5, -1], np.int64)], [4])
        assert odd.column("b").to_pylist() == ["0100"]


def _delete_files(table: Any, content: int | None = None) -> list[str]:
    """The delete files of the current snapshot (``content``: 1 position, 2 equality; None: all)."""
    from pyiceberg.manifest import ManifestContent

    found = []
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content == ManifestContent.DELETES:
            found += [e.data_file.file_path.removeprefix("file://")
                      for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                      if content is None or e.data_file.content.value == content]
    return found


def test_a_delete_set_larger_than_the_memory_limit_spills(tmp_path: Path) -> None:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"))
    catalog.create_namespace("ns")
    # 64 MB per query; the hash table of 1.5M deleted (path, position) pairs needs about twice that.
    engine = Engine(catalog, max_concurrent=1, memory_limit="64MB", threads=1)
    try:
        rows = 3_000_000
        t = catalog.create_table("ns.big", schema=pa.schema([("id", pa.int64())]))
        t.append(pa.table({"id": pa.array(range(rows), pa.int64())}))
        path = data_files(catalog.load_table("ns.big"))[0][0]
        position_delete(catalog.load_table("ns.big"), {path: list(range(0, rows, 2))})
        got = _run(engine, "SELECT count(*) AS n, sum(id) AS s FROM ns.big WHERE id >= 0")
        assert got.to_pylist() == [{"n": rows // 2, "s": sum(range(1, rows, 2))}]
        assert _slot_files(engine)  # it was the native path
    finally:
        engine.close()
        catalog.close()


def test_shapes_the_mapping_cannot_express_keep_the_arrow_path(lake: tuple[RocksCatalog, Engine]) -> None:
    catalog, engine = lake
    nested = catalog.create_table("ns.nested", schema=pa.schema([
        ("id", pa.int64()), ("s", pa.struct([("x", pa.int64())]))]))
    nested.append(pa.table({"id": [1, 2], "s": [{"x": 10}, {"x": 20}]}))
    assert _run(engine, "SELECT sum(s.x) AS x FROM ns.nested WHERE id > 0").to_pylist() == [{"x": 30}]
    assert not _slot_files(engine)
    assert isinstance(nested.schema().find_field("s").field_type, StructType)


def test_a_data_file_that_leads_outside_the_table_is_refused(lake: tuple[RocksCatalog, Engine],
                                                             tmp_path: Path) -> None:
    catalog, engine = lake
    t = catalog.create_table("ns.hostile", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    inside = data_files(catalog.load_table("ns.hostile"))[0][0].removeprefix("file://")
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"id": pa.array([666], pa.int64())}), secret)
    os.remove(inside)
    os.symlink(secret, inside)  # the manifest names a path in the table; its real file is not
    with pytest.raises(OutsideTableError) as info:
        _run(engine, "SELECT count(*) AS n FROM ns.hostile t JOIN ns.hostile u ON t.id = u.id")
    assert "outside" in str(info.value)
    assert not _slot_files(engine)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("native") / "warehouse").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_client_sql_cannot_name_a_file_even_a_pinned_one(served: ServerProcess) -> None:
    with fsql.connect(served.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA IF NOT EXISTS fs")
        cur.execute("CREATE TABLE fs.t (id BIGINT)")
        cur.execute("INSERT INTO fs.t SELECT i FROM range(10) r(i)")
        cur.execute("SELECT count(*) FROM fs.t a JOIN fs.t b ON a.id = b.id")
        assert cur.fetchall() == [(10,)]
        pinned = next(str(p) for p in (served.warehouse / "fs" / "t" / "data").rglob("*.parquet"))
        for sql in [f"SELECT count(*) FROM fs.t, read_parquet('{pinned}')",
                    f"SELECT * FROM fs.t WHERE id IN (SELECT id FROM read_parquet('{pinned}'))",
                    f"SELECT * FROM parquet_metadata('{pinned}')",
                    f"COPY (SELECT 1) TO '{pinned}' (FORMAT parquet, USE_TMP_FILE false)",
                    f"ATTACH '{pinned}' AS x",
                    "SELECT current_setting('allowed_paths')"]:
            with pytest.raises(Exception):  # noqa: B017, PT011  # the policy's refusal, whatever its class
                cur.execute(sql)
                cur.fetchall()
        cur.execute("SELECT count(*) FROM fs.t")
        assert cur.fetchall() == [(10,)]
    assert pq.read_table(pinned).num_rows == 10


def _kept_views(engine: Engine) -> dict[tuple[str, str], str]:
    return {name: body for slot in engine.slots._free for name, body in slot.kept_views.items()}


def test_kept_views_follow_commits_schema_changes_and_time_travel(lake: tuple[RocksCatalog, Engine]) -> None:
    """A slot keeps its views over read_parquet between queries of the same files; a commit,
    a schema change or a read at another snapshot each see their own rows right after."""
    catalog, engine = lake
    t = catalog.create_table("ns.kv", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": list(range(10))}))
    first = catalog.load_table("ns.kv").metadata.current_snapshot().snapshot_id
    counted = "SELECT count(*) AS n, sum(id) AS s FROM ns.kv"
    assert _run(engine, counted).to_pylist() == [{"n": 10, "s": 45}]
    kept = _kept_views(engine)
    assert list(kept) == [("ns", "kv")] and "read_parquet" in kept["ns", "kv"]
    slot = next(s for s in engine.slots._free if s.kept_views)
    assert slot.pristine()  # a kept view is not left-over state
    views = slot.admin.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    assert views == [("kv",)]
    assert _run(engine, counted).to_pylist() == [{"n": 10, "s": 45}]  # the kept view, used as it is
    assert _kept_views(engine) == kept

    t.append(pa.table({"id": [100, 101]}))  # a commit: new files, a new slot and view
    assert _run(engine, counted).to_pylist() == [{"n": 12, "s": 246}]

    with catalog.load_table("ns.kv").update_schema() as update:  # same files, another schema
        update.rename_column("id", "key")
    assert _run(engine, "SELECT count(*) AS n, sum(key) AS s FROM ns.kv").to_pylist() == [{"n": 12, "s": 246}]
    with pytest.raises(Exception, match="id"):  # noqa: PT011  # the binder's error, whatever its class
        _run(engine, counted)
    with catalog.load_table("ns.kv").update_schema() as update:
        update.add_column("tag", StringType())
    catalog.load_table("ns.kv").append(pa.table({"key": [7], "tag": ["x"]}))
    tagged = "SELECT count(*) AS n, count(tag) AS tagged, sum(key) AS s FROM ns.kv"
    assert _run(engine, tagged).to_pylist() == [{"n": 13, "tagged": 1, "s": 253}]

    # An older snapshot reads with its own schema (Iceberg's time travel): the column is id.
    old = f"SELECT count(*) AS n, sum(id) AS s FROM ns.kv AT (VERSION => {first})"
    assert _run(engine, old).to_pylist() == [{"n": 10, "s": 45}]
    assert _run(engine, tagged).to_pylist() == [{"n": 13, "tagged": 1, "s": 253}]
    # Every kept view names only files its own slot may read.
    for s in engine.slots._free:
        for body in s.kept_views.values():
            named = {p for p in body.split("'") if p.endswith(".parquet")}
            assert named and named <= s.files


def test_a_rolled_back_transaction_leaves_no_kept_view_behind(served: ServerProcess) -> None:
    """The slot reading a transaction's staged files keeps its view; after ROLLBACK the same
    query reads the table as committed."""
    counted = "SELECT count(*), sum(a.id) FROM kv.t a JOIN kv.t b ON a.id = b.id"
    with fsql.connect(served.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA IF NOT EXISTS kv")
        cur.execute("CREATE TABLE kv.t (id BIGINT)")
        cur.execute("INSERT INTO kv.t SELECT i FROM range(10) r(i)")
        cur.execute(counted)
        assert cur.fetchall() == [(10, 45)]
    with fsql.connect(served.location, autocommit=False) as txn, txn.cursor() as cur:
        cur.execute("INSERT INTO kv.t VALUES (100)")
        for _ in range(2):  # the second reads the view the first kept
            cur.execute(counted)
            assert cur.fetchall() == [(11, 145)]
        txn.rollback()
    with fsql.connect(served.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(counted)
        assert cur.fetchall() == [(10, 45)]


def test_a_suspect_query_drops_the_kept_views(lake: tuple[RocksCatalog, Engine]) -> None:
    """A query that failed (or changed the slot) leaves no kept view behind: what it did to
    one is not known, so the next query defines its own."""
    catalog, engine = lake
    t = catalog.create_table("ns.sus", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    assert _run(engine, "SELECT sum(id) AS s FROM ns.sus").to_pylist() == [{"s": 6}]
    assert _kept_views(engine)
    with pytest.raises(Exception, match="no_such"):  # noqa: PT011  # the binder's error, whatever its class
        _run(engine, "SELECT sum(no_such) AS s FROM ns.sus")
    assert not _kept_views(engine)
    for slot in engine.slots._free:
        assert slot.admin.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchall() == [(0,)]
    assert _run(engine, "SELECT sum(id) AS s FROM ns.sus").to_pylist() == [{"s": 6}]


def test_sql_write_reads_name_each_row_by_file_and_position(lake: tuple[RocksCatalog, Engine],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The read of a merge-on-read DELETE / UPDATE (``native_writes``): one query over the
    listed files, each row with its file's index in the list and its position in the file,
    earlier position and equality deletes left out; the same rows as the Arrow sources give."""
    catalog, engine = lake
    monkeypatch.setattr(native_writes, "_MIN_NATIVE_BYTES", 0)  # these files are small
    t = catalog.create_table("ns.w", schema=pa.schema([("id", pa.int64()), ("k", pa.string())]))
    for start in (0, 100, 200):
        t.append(pa.table({"id": pa.array(range(start, start + 100), pa.int64()),
                           "k": [f"k{i % 7}" for i in range(start, start + 100)]}))
    old = {pq.read_table(p.removeprefix("file://")).column("id")[0].as_py(): p
           for p, _ in data_files(catalog.load_table("ns.w"))}
    position_delete(catalog.load_table("ns.w"), {old[0]: [3, 50], old[200]: [0, 99]})
    by_position = {os.path.realpath(p) for p in _delete_files(catalog.load_table("ns.w"))}
    equality_delete(catalog.load_table("ns.w"), {"k": ["k1"]})
    for start in (300, 400):  # after the deletes: none applies to these
        catalog.load_table("ns.w").append(pa.table({"id": pa.array(range(start, start + 10), pa.int64()),
                                                    "k": ["k1"] * 10}))
    t = catalog.load_table("ns.w")
    new = {pq.read_table(p.removeprefix("file://")).column("id")[0].as_py(): p for p, _ in data_files(t)}
    # Files without deletes at list indexes 0 and 2 (one read, not consecutive), the others apart.
    paths = [new[300], old[0], new[400], old[200], old[100]]
    pin_sql, pins = engine.plan("SELECT __icefloe_file AS f, __icefloe_pos AS p, id FROM ns.w", None)
    tags = {(("ns",), "w"): paths}

    def read() -> list[dict[str, Any]]:
        got = engine.query_table(pin_sql, pins, None, file_tags=tags, file_positions=True)
        return sorted(got.to_pylist(), key=lambda r: (r["f"], r["p"]))

    native = read()
    # DuckDB read the data files and the equality delete file; the positions already deleted
    # came from the engine's cache of parsed delete files (a registered table), so the slot
    # may not read the position delete file.
    slot = _slot_files(engine)
    assert _real_files(t) <= slot
    by_equality = {os.path.realpath(p) for p in _delete_files(t)} - by_position
    assert by_equality and by_equality <= slot
    assert by_position and not by_position & slot
    expected = []
    for index, path in enumerate(paths):
        ids = pq.read_table(path.removeprefix("file://")).column("id").to_pylist()
        gone = {old[0]: {3, 50}, old[200]: {0, 99}}.get(path, set())
        for pos, i in enumerate(ids):
            if pos not in gone and (i >= 300 or i % 7 != 1):
                expected.append({"f": index, "p": pos, "id": i})
    assert native == expected
    # Positions deleted in a few runs of rows (a clustered DELETE's) are a filter in the scan,
    # with no table registered; past _RANGE_FILTER_RUNS runs they are anti-joined: same rows.
    snapshot = t.metadata.current_snapshot().snapshot_id
    file_deletes = engine.sources.file_deletes(t, snapshot)

    def built() -> Any:
        return native_writes.tagged_table(engine.natives, t, snapshot, t.schema(), paths, file_deletes, True, "__w",
                                          lambda files: files)

    filtered = built()
    assert filtered.registered == () and "NOT BETWEEN" not in filtered.select
    assert "file_row_number <> 50" in filtered.select and "ANTI JOIN __w_deleted" not in filtered.select
    monkeypatch.setattr(deleted_rows, "_RANGE_FILTER_RUNS", 0)
    monkeypatch.setattr(engine.natives, "_range_filters", LockedLRU(16))
    joined = built()
    assert [name for name, _ in joined.registered] == ["__w_deleted"] and "ANTI JOIN __w_deleted" in joined.select
    assert read() == expected
    monkeypatch.undo()
    monkeypatch.setattr(native_writes, "_MIN_NATIVE_BYTES", 0)
    # A statement reading other files of the same snapshot (a clustered DELETE) reuses the slot:
    # it was made for every data file of the snapshot, not only the ones read.
    made = engine.slots._made
    tags = {(("ns",), "w"): paths[1:3]}
    assert read() == [dict(r, f=r["f"] - 1) for r in expected if r["f"] in (1, 2)]
    assert engine.slots._made == made
    tags = {(("ns",), "w"): paths}
    monkeypatch.setattr(native_writes, "_MIN_NATIVE_BYTES", 16 << 20)
    # A read smaller than a new slot costs is still DuckDB's when a slot for its files is free
    # (consecutive merge-on-read DELETEs leave the data files as they were) ...
    assert read() == expected
    assert engine.slots._made == made and engine.slots._free[-1].files == frozenset(slot)
    # ... or when its files carry many deleted positions (the Arrow sources merge them per read).
    monkeypatch.setattr(engine.slots, "covering", lambda files: None)
    monkeypatch.setattr(native_writes, "_NATIVE_DELETED_POSITIONS", 4)  # old[0] and old[200] lost 4
    assert read() == expected
    assert engine.slots._free[-1].files == frozenset(slot)
    # Otherwise it stays on the Arrow sources (their slot reads no file).
    monkeypatch.setattr(native_writes, "_NATIVE_DELETED_POSITIONS", 5)
    assert read() == expected
    assert engine.slots._free[-1].files == frozenset()
    monkeypatch.setattr(engine_module, "tagged_table", lambda *args: None)  # the Arrow sources
    assert read() == expected


def test_a_new_filter_pruned_to_the_same_files_finds_its_view_built(lake: tuple[RocksCatalog, Engine]) -> None:
    """A point lookup's key changes every query; its view over the same files is built once,
    and another column set or snapshot gets its own."""
    from pyiceberg.expressions import EqualTo

    catalog, engine = lake
    table = catalog.create_table("ns.kv", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(pa.table({"id": pa.array(range(100), pa.int64()), "v": [str(i) for i in range(100)]}))
    table = catalog.load_table("ns.kv")
    snapshot = table.metadata.current_snapshot().snapshot_id
    first = engine.natives.native_table(table, snapshot, table.schema(), EqualTo("id", 7))
    again = engine.natives.native_table(table, snapshot, table.schema(), EqualTo("id", 8))
    assert first is not None and again is first
    table.update_schema().add_column("w", LongType()).commit()
    table = catalog.load_table("ns.kv")
    widened = engine.natives.native_table(table, snapshot, table.schema(), EqualTo("id", 9))
    assert widened is not None and widened is not first and '"w"' in widened.select
    assert engine.natives.native_table(table, snapshot, table.schema(), EqualTo("id", 3)) is widened


def _kept_tables(engine: Engine) -> dict[str, int]:
    """Every table of deleted rows some free slot keeps -> the rows it deletes."""
    found = {}
    for slot in engine.slots._free:
        for name in slot.kept_tables:
            counted = "count(*) FILTER (WHERE NOT keep)" if name.endswith("_mask") else "sum(bit_count(b))"
            found[name] = slot.admin.execute(f'SELECT {counted} FROM memory.main."{name}"').fetchall()[0][0]
    return found


def test_a_scan_with_no_filter_lines_each_file_up_with_its_kept_flags(lake: tuple[RocksCatalog, Engine],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement reading one table with no filter to push into its scan applies scattered
    position deletes by POSITIONAL JOIN of each file with a kept table of flags in its row
    order, in a slot that need not keep insertion order. Every row it keeps is the right one
    (files of many row groups, positions past the file's end ignored), filtered and unfiltered
    statements agree, and past the flags' budget the bits take over with the same answers."""
    from flight_server.engine import slots as slots_module

    catalog, engine = lake
    t = catalog.create_table("ns.flags", schema=pa.schema([("id", pa.int64()), ("g", pa.int64())]),
                             properties={"write.parquet.row-group-limit": "4096"})
    rows = 30_000
    for start in (0, rows, 2 * rows):
        ids = np.arange(start, start + rows, dtype=np.int64)
        t.append(pa.table({"id": ids, "g": ids % 7}))
    by_start = {pq.read_table(p.removeprefix("file://")).column("id")[0].as_py(): p
                for p, _ in data_files(catalog.load_table("ns.flags"))}
    assert len(by_start) == 3 and all(pq.ParquetFile(p.removeprefix("file://")).num_row_groups > 1
                                      for p in by_start.values())
    rng = np.random.default_rng(3)
    deleted = {start: sorted(set(rng.choice(rows, 900, replace=False).tolist())) for start in (0, 2 * rows)}
    position_delete(catalog.load_table("ns.flags"),
                    {by_start[start]: [*deleted[start], rows + 5] for start in deleted}, file_scoped=True)
    expected = sorted(set(range(3 * rows)) - {start + r for start, rs in deleted.items() for r in rs})

    def answers() -> list[Any]:
        return [_run(engine, "SELECT id FROM ns.flags ORDER BY id").column("id").to_pylist(),
                _run(engine, "SELECT g, count(*) AS n, sum(id) AS s FROM ns.flags GROUP BY g ORDER BY g").to_pylist(),
                _run(engine, "SELECT g, count(*) AS n, sum(id) AS s FROM ns.flags WHERE id >= 0 "
                             "GROUP BY g ORDER BY g").to_pylist()]

    got = answers()
    assert got[0] == expected
    by_group = [{"g": g, "n": sum(1 for i in expected if i % 7 == g), "s": sum(i for i in expected if i % 7 == g)}
                for g in range(7)]
    assert got[1] == by_group and got[2] == by_group
    unordered = [slot for slot in engine.slots._free if slot.unordered]
    assert len(unordered) == 1 and all(n.endswith("_mask") for n in unordered[0].kept_tables)
    # A table of flags per file (the unordered slot), one of bits for both files (the other).
    assert sorted(_kept_tables(engine).values()) == [900, 900, 1800]
    assert unordered[0].pristine()

    # Past the flags' budget (a byte a row), the bits (a bit a row) read the same rows.
    monkeypatch.setattr(native_tables, "KEPT_POSITION_BYTES", 2 * rows - 1)
    monkeypatch.setattr(engine.natives, "_built", LockedLRU(8))
    monkeypatch.setattr(slots_module, "SLOT_KEPT_BYTES", 1 << 30)
    for slot in list(engine.slots._free):
        engine.slots._free.remove(slot)
        engine.slots._made -= 1
        slot.close()
    assert answers() == got
    assert not any(slot.unordered for slot in engine.slots._free)


def test_a_warm_scan_keeps_its_positions_and_view_in_the_slot(lake: tuple[RocksCatalog, Engine],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Scattered positions are a table the slot keeps, named by what it holds: a warm scan
    registers nothing, keeps its view and cursor, and a later delete of the same data files
    (same slot) or a read of an older snapshot each name their own positions. (Queries with a
    filter on the table: those read the bits per file; see the next test for the others.)"""
    from flight_server.engine import slots as slots_module

    catalog, engine = lake
    t = catalog.create_table("ns.warm", schema=pa.schema([("id", pa.int64())]))
    for start in (0, 100, 200):
        t.append(pa.table({"id": pa.array(range(start, start + 100), pa.int64())}))
    by_start = {pq.read_table(p.removeprefix("file://")).column("id")[0].as_py(): p
                for p, _ in data_files(catalog.load_table("ns.warm"))}
    position_delete(catalog.load_table("ns.warm"), {by_start[0]: list(range(0, 100, 2))}, file_scoped=True)
    position_delete(catalog.load_table("ns.warm"), {by_start[200]: list(range(1, 100, 2))}, file_scoped=True)
    before = catalog.load_table("ns.warm").metadata.current_snapshot().snapshot_id
    counted = "SELECT count(*) AS n, sum(id) AS s FROM ns.warm WHERE id >= 0"
    first = [{"n": 200, "s": sum(range(300)) - sum(range(0, 100, 2)) - sum(range(201, 300, 2))}]
    for _ in range(2):
        assert _run(engine, counted).to_pylist() == first
    assert list(_kept_tables(engine).values()) == [100]
    slot = next(s for s in engine.slots._free if s.kept_tables)
    assert slot.kept_views and slot._kept is not None  # its view and cursor serve the next query
    assert slot.pristine()

    # Another delete of the first file: the same data files, so the same slot; new positions.
    position_delete(catalog.load_table("ns.warm"), {by_start[0]: [1, 3]}, file_scoped=True)
    second = [{"n": first[0]["n"] - 2, "s": first[0]["s"] - 4}]
    assert _run(engine, counted).to_pylist() == second
    assert sorted(_kept_tables(engine).values()) == [100, 102]
    old = f"SELECT count(*) AS n, sum(id) AS s FROM ns.warm AT (VERSION => {before}) WHERE id >= 0"
    assert _run(engine, old).to_pylist() == first
    assert _run(engine, counted).to_pylist() == second
    assert len(engine.slots._free) == 1 and engine.slots._free[0].pristine()

    # Client SQL cannot name a kept table (only the tables it pins).
    [name] = [n for n, rows in _kept_tables(engine).items() if rows == 102]
    with pytest.raises(Exception):  # noqa: B017,PT011  # refused by the planner, whatever its class
        _run(engine, f'SELECT count(*) FROM memory.main."{name}"')

    # Past the slot's budget the least recently used table goes (with the kept views).
    monkeypatch.setattr(slots_module, "SLOT_KEPT_BYTES", 1)
    position_delete(catalog.load_table("ns.warm"), {by_start[0]: [5]}, file_scoped=True)
    third = [{"n": second[0]["n"] - 1, "s": second[0]["s"] - 5}]
    assert _run(engine, counted).to_pylist() == third
    assert list(_kept_tables(engine).values()) == [103]
    assert _run(engine, old).to_pylist() == first
    assert list(_kept_tables(engine).values()) == [100]
    assert engine.slots._free[0].pristine()
    # One query needing two of them keeps both, over the budget, until the next needs room.
    both = (f"SELECT (SELECT count(*) FROM ns.warm) AS now, "
            f"(SELECT count(*) FROM ns.warm AT (VERSION => {before})) AS then")
    assert _run(engine, both).to_pylist() == [{"now": third[0]["n"], "then": first[0]["n"]}]
    assert sorted(_kept_tables(engine).values()) == [100, 103]

    # A suspect query drops them; past KEPT_POSITION_BYTES the positions are the query's own.
    with pytest.raises(Exception, match="no_such"):  # noqa: PT011  # the binder's error, whatever its class
        _run(engine, "SELECT sum(no_such) AS s FROM ns.warm WHERE id >= 0")
    assert not _kept_tables(engine)
    monkeypatch.setattr(native_tables, "KEPT_POSITION_BYTES", 0)
    monkeypatch.setattr(engine.natives, "_built", LockedLRU(8))  # the views built so far kept theirs
    t = catalog.load_table("ns.warm")
    view = engine.natives.native_table(t, t.metadata.current_snapshot().snapshot_id, t.schema())
    assert view is not None and not view.kept and [n for n, _ in view.registered] == ["__icefloe_positions_0"]
    assert _run(engine, counted).to_pylist() == third
    assert not _kept_tables(engine) and engine.slots._free[0].pristine()
