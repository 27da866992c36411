"""Compaction racing a merge-on-read delete: a position delete that lands on one of the
files a compaction is rewriting, while it stages, is never undone by the rewrite (the
rewrite is staged again on the version with the delete, or dropped)."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow.parquet as pq
from catalog_testlib import Interleaved, appender_with_files

from catalog import RocksCatalog, delete_writer
from catalog.deletes import plan_files
from catalog.maintenance import compact
from catalog.maintenance_worker import MaintenanceWorker, stage_rewrite


def _position_delete(catalog: RocksCatalog, path_index: int, positions: list[int]) -> None:
    """A merge-on-read delete of ``positions`` of the table's ``path_index``-th data file."""
    table = catalog.load_table("ns.t")
    files = [p.data_file for p in plan_files(table.metadata, table.io, table.current_snapshot().snapshot_id)]
    files.sort(key=lambda f: f.file_path)
    commit_uuid = uuid.uuid4()
    deletes = delete_writer.write_position_deletes(table, [files[path_index]], [np.array(positions)], commit_uuid)
    delta = delete_writer.row_delta(table, deletes, [], commit_uuid)
    txn = table.transaction()
    txn._apply(delta.updates, delta.requirements)
    txn.commit_transaction()


def _ids(catalog: RocksCatalog) -> list[int]:
    return sorted(catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist())


def test_a_position_delete_landing_while_small_files_are_compacted_is_kept(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = appender_with_files(catalog, 4, 10)  # small files without deletes
    table = catalog.load_table("ns.t")
    first = sorted(p.data_file.file_path for p in plan_files(table.metadata, table.io,
                                                               table.current_snapshot().snapshot_id))[0]
    first_ids = pq.read_table(first.removeprefix("file://")).column("id").to_pylist()
    racing = Interleaved(worker, before={stage_rewrite: lambda: _position_delete(catalog, 0, [0, 1, 2])})
    compact(appender, ("ns", "t"), min_input_files=2, worker=racing)
    gone = set(first_ids[:3])
    assert _ids(catalog) == [i for i in range(40) if i not in gone]


def test_compaction_drops_the_delete_files_it_makes_unneeded(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    appender = appender_with_files(catalog, 4, 10)
    _position_delete(catalog, 0, [0, 1])
    _position_delete(catalog, 1, [5])
    before = catalog.load_table("ns.t").current_snapshot()
    assert before.summary["total-delete-files"] == "2"
    expected = _ids(catalog)
    assert len(expected) == 37
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=worker)
    assert report.compacted_files == 4
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot.summary["total-delete-files"] == "0" and snapshot.summary["removed-delete-files"] == "2"
    assert snapshot.summary["total-position-deletes"] == "0" and snapshot.summary["total-records"] == "37"
    assert _ids(catalog) == expected
    manifests = snapshot.manifests(table.io)
    deletes = [m for m in manifests if m.content.value == 1]
    # The dropped files are recorded as DELETED entries of a delete manifest, never in a data manifest.
    assert all(m.added_files_count == 0 and m.existing_files_count == 0 for m in deletes)
    assert all(e.data_file.content.value == 0 for m in manifests if m.content.value == 0
               for e in m.fetch_manifest_entry(table.io, discard_deleted=False))
    # Time travel to before the compaction still applies the deletes there.
    old = sorted(table.scan(snapshot_id=before.snapshot_id).to_arrow().column("id").to_pylist())
    assert old == expected
