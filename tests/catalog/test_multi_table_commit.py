"""``RocksCatalog.commit_tables``: several tables in one write batch, all or nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_testlib import SCHEMA, rows
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

from catalog import RocksCatalog, keys


def _append_change(table: Table, data: pa.Table) -> tuple[str, tuple, tuple]:  # type: ignore[type-arg]
    """The requirements and updates pyiceberg would send to commit an append of ``data``."""
    txn = table.transaction()
    txn.append(data)
    return ".".join(table.name()), txn._requirements, txn._updates


def _metadata_files(warehouse: Path) -> set[str]:
    return {str(p) for p in warehouse.rglob("*.metadata.json")}


def test_two_tables_land_in_one_batch_with_consecutive_seqs(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    a = rocks.create_table("ns.a", SCHEMA)
    b = rocks.create_table("ns.b", SCHEMA)
    head = rocks.log.head()
    writes: list[int] = []
    original = rocks.store.write

    def counting_write(puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = (), sync: bool = True) -> None:
        writes.append(len(puts))
        original(puts, deletes, sync)

    rocks.store.write = counting_write  # type: ignore[method-assign]  # count batches, behaviour unchanged
    responses = rocks.commit_tables([_append_change(a, rows(0, 3)), _append_change(b, rows(10, 5))])
    rocks.store.write = original  # type: ignore[method-assign]
    assert len(writes) == 1, "both tables must land in one RocksDB write batch"
    assert rocks.log.head() == head + 2
    records = list(rocks.log.read(head))
    assert [(r.table, r.operation, r.added_rows) for r in records] == [("a", "append", 3), ("b", "append", 5)]
    assert [r.seq for r in records] == [head + 1, head + 2]
    assert rocks.load_table("ns.a").scan().to_arrow().num_rows == 3
    assert rocks.load_table("ns.b").scan().to_arrow().num_rows == 5
    assert [r.metadata_location for r in responses] == [rec.metadata_location for rec in records]


def test_a_failed_requirement_on_one_table_leaves_both_unchanged(rocks: RocksCatalog, tmp_path: Path) -> None:
    rocks.create_namespace("ns")
    a = rocks.create_table("ns.a", SCHEMA)
    b = rocks.create_table("ns.b", SCHEMA)
    head = rocks.log.head()
    files = _metadata_files(tmp_path / "warehouse")
    stale_b = _append_change(b, rows(0, 2))
    rocks.load_table("ns.b").append(rows(100, 1))  # b moves on: stale_b's requirement fails now
    files = _metadata_files(tmp_path / "warehouse")
    head = rocks.log.head()
    with pytest.raises(CommitFailedException):
        rocks.commit_tables([_append_change(rocks.load_table("ns.a"), rows(0, 3)), stale_b])
    assert rocks.log.head() == head
    assert rocks.load_table("ns.a").scan().to_arrow().num_rows == 0
    assert rocks.load_table("ns.b").scan().to_arrow().num_rows == 1
    assert _metadata_files(tmp_path / "warehouse") == files, "staged metadata files must be removed"
    a_uuid = a.metadata.table_uuid
    wrong_uuid = AssertTableUUID(uuid="00000000-0000-0000-0000-000000000000")  # type: ignore[call-arg]
    with pytest.raises(CommitFailedException):
        rocks.commit_tables([
            ("ns.a", (AssertTableUUID(uuid=a_uuid),), (SetPropertiesUpdate(updates={"k": "v"}),)),  # type: ignore[call-arg]
            ("ns.b", (wrong_uuid,), (SetPropertiesUpdate(updates={"k": "v"}),)),  # type: ignore[call-arg]
        ])
    assert "k" not in rocks.load_table("ns.a").properties
    assert rocks.log.head() == head


def test_a_lost_race_after_staging_lands_nothing(rocks: RocksCatalog) -> None:
    """The compare-and-swap is checked for every table under the lock, after staging."""
    rocks.create_namespace("ns")
    a = rocks.create_table("ns.a", SCHEMA)
    b = rocks.create_table("ns.b", SCHEMA)
    head = rocks.log.head()
    from catalog import table_commits

    original_stage = table_commits.stage
    staged_once: list[str] = []

    def stage_then_race(catalog, identifier, requirements, updates):  # type: ignore[no-untyped-def]
        staged = original_stage(catalog, identifier, requirements, updates)
        if identifier == "ns.b" and not staged_once:
            staged_once.append(identifier)
            # Another writer commits to b between staging and landing.
            rocks.load_table("ns.b").append(rows(0, 1))
        return staged

    table_commits.stage = stage_then_race  # type: ignore[assignment]
    try:
        with pytest.raises(CommitFailedException):
            rocks.commit_tables([_append_change(a, rows(0, 3)), _append_change(b, rows(0, 2))])
    finally:
        table_commits.stage = original_stage
    assert rocks.log.head() == head + 1  # only the racing append
    assert rocks.load_table("ns.a").scan().to_arrow().num_rows == 0


def test_bad_transactions_are_refused_before_anything_is_written(rocks: RocksCatalog, tmp_path: Path) -> None:
    rocks.create_namespace("ns")
    a = rocks.create_table("ns.a", SCHEMA)
    head = rocks.log.head()
    with pytest.raises(ValueError, match="at least one"):
        rocks.commit_tables([])
    with pytest.raises(ValueError, match="more than once"):
        rocks.commit_tables([_append_change(a, rows(0, 1)), _append_change(a, rows(0, 1))])
    with pytest.raises(NoSuchTableError):
        rocks.commit_tables([_append_change(a, rows(0, 1)), ("ns.missing", (), ())])
    assert rocks.log.head() == head
    assert rocks.store.get(keys.table_key(("ns",), "missing")) is None
    assert rocks.load_table("ns.a").scan().to_arrow().num_rows == 0
    assert os.path.isdir(tmp_path / "warehouse")


def test_tables_loaded_in_one_consistent_read_are_never_torn_by_a_commit(rocks: RocksCatalog) -> None:
    """Inside ``consistent_reads`` every load reads the pointers of one moment: a multi-table
    commit landing between two loads shows in neither (how a statement pins its tables)."""
    rocks.create_namespace("ns")
    a = rocks.create_table("ns.a", SCHEMA)
    b = rocks.create_table("ns.b", SCHEMA)
    with rocks.consistent_reads():
        before_a = rocks.load_table("ns.a")
        rocks.commit_tables([_append_change(a, rows(0, 3)), _append_change(b, rows(10, 5))])
        before_b = rocks.load_table("ns.b")
        assert rocks.metadata_location_of("ns.a") == before_a.metadata_location
        with rocks.consistent_reads():  # a nested block reads the outer block's moment
            assert rocks.load_table("ns.b").metadata_location == before_b.metadata_location
    assert before_a.current_snapshot() is None and before_b.current_snapshot() is None
    assert rocks.load_table("ns.a").scan().to_arrow().num_rows == 3  # after the block: the commit
    assert rocks.load_table("ns.b").scan().to_arrow().num_rows == 5
