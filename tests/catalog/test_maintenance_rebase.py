"""Maintenance keeps out of the table's commit slot while it reads or writes manifests.

Compaction and manifest merges are staged outside the slot and rebased onto the appends that
landed meanwhile (catalog.rebase): appends never wait for the staging, and the rebased
snapshot is a correct Iceberg snapshot over every row. Orphan removal reads the retained
manifests outside the slot too, and still never takes a file an append commits meanwhile.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
from catalog_testlib import Interleaved, appender_with_files, id_rows, local_path
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestEntryStatus

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.maintenance import compact, merge_manifests, remove_orphans
from catalog.maintenance_worker import (
    IN_PROCESS,
    MaintenanceWorker,
    referenced_files,
    stage_manifest_merge,
    stage_rewrite,
)


def _ids_of(cat: RocksCatalog) -> list[int]:
    return sorted(cat.load_table("ns.t").scan().to_arrow().column("id").to_pylist())


def _append_from_another_thread(appender: Appender, rows: pa.Table) -> None:
    """One append by another writer, which must finish while the caller is staging."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            appender.append_table(("ns", "t"), rows)
        except BaseException as exc:
            failed.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    # Staging inside the commit slot would block this append until staging ends: never here.
    assert done.wait(30), "an append waited for compaction's staging"
    assert not failed, failed


def _check_snapshot_consistent(cat: RocksCatalog) -> None:
    """Summary totals, sequence numbers and manifests agree with what the snapshot holds."""
    table = cat.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    parent = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id)  # type: ignore[arg-type]
    assert parent is not None and snapshot.sequence_number == parent.sequence_number + 1  # type: ignore[operator]
    assert table.metadata.last_sequence_number == snapshot.sequence_number
    live = []
    for manifest in snapshot.manifests(table.io):
        assert manifest.sequence_number <= snapshot.sequence_number  # type: ignore[operator]
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            live.append(entry.data_file)
            if entry.status == ManifestEntryStatus.ADDED:
                assert entry.snapshot_id == manifest.added_snapshot_id
                assert entry.sequence_number == manifest.sequence_number
    rows = table.scan().to_arrow().num_rows
    assert int(snapshot.summary["total-records"]) == sum(f.record_count for f in live) == rows
    assert int(snapshot.summary["total-data-files"]) == len(live)
    assert int(snapshot.summary["total-files-size"]) == sum(f.file_size_in_bytes for f in live)


def test_appends_land_while_compaction_stages_and_the_rewrite_is_rebased_over_them(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = appender_with_files(catalog, 6, 10)
    def three_appends() -> None:
        for k in range(3):
            _append_from_another_thread(appender, id_rows(5, 1000 + 5 * k))

    racing = Interleaved(worker, before={stage_rewrite: three_appends})
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=racing)
    assert report.compacted_files == 6 and report.written_files == 1
    assert racing.calls.count("stage_rewrite") == 1  # rebased, not staged again
    assert _ids_of(catalog) == list(range(60)) + list(range(1000, 1015))
    _check_snapshot_consistent(catalog)
    table = catalog.load_table("ns.t")
    files = [t.file for t in table.scan().plan_files()]
    assert len(files) == 4  # the compacted file and the three appended during staging
    record = catalog.log.get(catalog.log.head())
    assert record is not None and record.operation == "replace"
    # Compaction changes no row a reader sees (issue 38: counts are what readers see).
    assert (record.added_rows, record.deleted_rows, record.data_change) == (0, 0, False)
    # Appends and another compaction go on from the rebased snapshot.
    appender.append_table(("ns", "t"), id_rows(5, 2000))
    assert compact(appender, ("ns", "t"), min_input_files=2, worker=worker).compacted_files == 5
    assert _ids_of(catalog) == list(range(60)) + list(range(1000, 1015)) + list(range(2000, 2005))
    _check_snapshot_consistent(catalog)


def test_a_rebased_compaction_reads_back_in_another_iceberg_reader(catalog: RocksCatalog, tmp_path: Path) -> None:
    appender = appender_with_files(catalog, 4, 10)
    racing = Interleaved(
        IN_PROCESS, before={stage_rewrite: lambda: _append_from_another_thread(appender, id_rows(3, 500))}
    )
    assert compact(appender, ("ns", "t"), min_input_files=2, worker=racing).compacted_files == 4
    table = catalog.load_table("ns.t")
    other = SqlCatalog("other", uri=f"sqlite:///{tmp_path}/other.db", warehouse=f"file://{tmp_path}/other")
    other.create_namespace("ns")
    registered = other.register_table(("ns", "copy"), table.metadata_location)
    assert sorted(registered.scan().to_arrow().column("id").to_pylist()) == list(range(40)) + [500, 501, 502]
    # The pre-compaction snapshot and every snapshot in between still read their own rows.
    counts = {s.snapshot_id: registered.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows
              for s in registered.metadata.snapshots}
    assert sorted(counts.values())[-2:] == [43, 43]


def test_a_delete_landing_while_compaction_stages_makes_it_stage_again(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = appender_with_files(catalog, 4, 10)

    def append_then_delete() -> None:  # touches only the new file, not the rewrite's inputs
        _append_from_another_thread(appender, id_rows(5, 1000))
        catalog.load_table("ns.t").delete("id = 1000")

    racing = Interleaved(worker, before={stage_rewrite: append_then_delete})
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=racing)
    assert racing.calls.count("stage_rewrite") == 2  # not rebased over a delete: staged again
    assert report.compacted_files == 4
    assert _ids_of(catalog) == list(range(40)) + [1001, 1002, 1003, 1004]
    _check_snapshot_consistent(catalog)


def test_a_manifest_merge_is_rebased_over_appends_during_its_staging(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    no_small_files = {"icefloe.compaction.small-file-bytes": "1"}
    catalog.load_table("ns.t").transaction().set_properties(no_small_files).commit_transaction()
    appender = appender_with_files(catalog, 20, 5)
    racing = Interleaved(
        worker, before={stage_manifest_merge: lambda: _append_from_another_thread(appender, id_rows(5, 500))}
    )
    assert merge_manifests(appender, ("ns", "t"), worker=racing) == 20
    assert racing.calls.count("stage_manifest_merge") == 1
    table = catalog.load_table("ns.t")
    assert len(table.current_snapshot().manifests(table.io)) == 2  # type: ignore[union-attr]
    assert _ids_of(catalog) == list(range(100)) + list(range(500, 505))
    _check_snapshot_consistent(catalog)


def test_appends_land_while_orphans_are_swept_and_their_files_are_spared(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = appender_with_files(catalog, 3, 10)
    orphan = Path(local_path(catalog.warehouse), "ns", "t", "data", "left-behind.parquet")
    orphan.write_bytes(b"not referenced by anything")
    os.utime(orphan, (1, 1))
    racing = Interleaved(
        worker, before={referenced_files: lambda: _append_from_another_thread(appender, id_rows(5, 100))}
    )
    assert remove_orphans(appender, ("ns", "t"), grace_s=0, worker=racing) == 1
    assert not orphan.exists()
    assert all(Path(t.file.file_path.removeprefix("file://")).exists()
               for t in catalog.load_table("ns.t").scan().plan_files())
    assert _ids_of(catalog) == list(range(30)) + list(range(100, 105))
