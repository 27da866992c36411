"""Delete sets larger than the configured cache budget (``ICEFLOE_DELETE_CACHE_BYTES``) still
read correctly: a server with a 64 KiB budget answers over a table whose position deletes hold
far more than that, and the delete-set cache itself never holds more than its budget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import pytest
from servers import ServerProcess
from sqlwrites_lib import scalar, update

from catalog.deletes import DeleteSets, plan_files

BUDGET = 64 << 10
ROWS = 200_000


@pytest.fixture(scope="module")
def small_budget_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("budget") / "warehouse"
    proc = ServerProcess(warehouse, env={"ICEFLOE_DELETE_CACHE_BYTES": str(BUDGET)}).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_delete_set_larger_than_the_budget(small_budget_server: ServerProcess) -> None:
    with fsql.connect(small_budget_server.location, autocommit=True) as conn:
        update(conn, "CREATE SCHEMA big")
        update(conn, "CREATE TABLE big.t (id BIGINT NOT NULL, v BIGINT)")
        update(conn, "ALTER TABLE big.t SET ('write.delete.mode' = 'merge-on-read', "
                     "'write.update.mode' = 'merge-on-read')")
        update(conn, f"INSERT INTO big.t SELECT i, i * 2 FROM range(0, {ROWS}) r(i)")
        # 160,000 deleted positions: 1.25 MiB as int64, twenty times the budget.
        assert update(conn, "DELETE FROM big.t WHERE id % 5 <> 0") == ROWS * 4 // 5
        kept = list(range(0, ROWS, 5))
        assert scalar(conn, "SELECT count(*) FROM big.t") == len(kept)
        assert scalar(conn, "SELECT sum(id) FROM big.t") == sum(kept)
        assert scalar(conn, "SELECT count(*) FROM big.t WHERE id % 5 <> 0") == 0
        # A merge-on-read UPDATE and a second DELETE read through the same deletes again.
        assert update(conn, "UPDATE big.t SET v = -1 WHERE id < 1000") == 200
        assert update(conn, "DELETE FROM big.t WHERE id >= 100000") == len(kept) // 2
        assert scalar(conn, "SELECT count(*) FROM big.t") == len(kept) // 2
        assert scalar(conn, "SELECT count(*) FROM big.t WHERE v = -1") == 200
        assert scalar(conn, "SELECT sum(v) FROM big.t WHERE v >= 0") == sum(2 * i for i in kept if 1000 <= i < 100000)


def test_the_cache_holds_at_most_its_budget(small_budget_server: ServerProcess) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("reader", warehouse=str(small_budget_server.warehouse), **{"read-only": "true"})
    try:
        table: Any = cat.load_table("big.t")
        planned = plan_files(table.metadata, table.io, table.current_snapshot().snapshot_id)
        sets = DeleteSets(BUDGET)
        sizes = []
        for p in planned:
            if p.deletes.positions:
                positions = sets.positions(table.io, p.deletes, p.data_file.file_path)
                sizes.append(int(positions.nbytes))
                assert sets.held_bytes <= BUDGET
        # The large set was read whole (and answered), but not kept.
        assert max(sizes) > BUDGET and sets.held_bytes <= BUDGET
        unbounded = DeleteSets(1 << 30)
        for p in planned:
            if p.deletes.positions:
                unbounded.positions(table.io, p.deletes, p.data_file.file_path)
        assert unbounded.held_bytes > BUDGET  # what the budget saves
    finally:
        cat.close()


def test_positions_a_writer_remembers_are_read_without_the_file(tmp_path: Any) -> None:
    """A merge-on-read statement hands the positions it just committed to the cache, so the
    next statement does not read its delete file back; within the budget only."""
    import numpy as np
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    from catalog.deletes import FileDeletes

    absent = str(tmp_path / "deletes.parquet")  # never written: a read of it would fail
    delete_file = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=absent,
                                     file_format=FileFormat.PARQUET, record_count=3, file_size_in_bytes=1)
    io = PyArrowFileIO()
    sets = DeleteSets(1 << 20)
    sets.remember_positions(absent, {"data.parquet": np.array([1, 5, 9])})
    assert sets.positions(io, FileDeletes(positions=(delete_file,)), "data.parquet").tolist() == [1, 5, 9]
    assert sets.positions(io, FileDeletes(positions=(delete_file,)), "other.parquet").tolist() == []
    over_budget = DeleteSets(16)
    over_budget.remember_positions(absent, {"data.parquet": np.array([1, 5, 9])})
    assert over_budget.held_bytes == 0
    with pytest.raises(FileNotFoundError):
        over_budget.positions(io, FileDeletes(positions=(delete_file,)), "data.parquet")


def test_distinct_sorted_is_numpys_unique() -> None:
    """Delete sets are made distinct with one sort (numpy 2.4's hashing ``unique`` took 30x
    longer): the same answer for empty, single, repeated, negative and unordered values."""
    import numpy as np

    from catalog.deletes import distinct_sorted

    rng = np.random.default_rng(38)
    cases = [np.empty(0, np.int64), np.array([7], np.int64), np.array([3, 3, 3], np.int64),
             np.array([5, -1, 5, 2, 2, 9, -1], np.int64), rng.integers(0, 1000, 50_000, dtype=np.int64),
             np.arange(100_000, dtype=np.int64)]
    for values in cases:
        got = distinct_sorted(values)
        assert got.dtype == np.int64 and got.tolist() == np.unique(values).tolist()
