"""Compaction, snapshot expiry and orphan removal, with writers and readers running.

Compaction's staging runs in each kind of ``MaintenanceWorker``: inline, and in a worker
process (as the server runs it).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_testlib import Interleaved, id_rows, local_path
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.types import StringType

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.maintenance import (
    compact,
    expire_snapshots,
    maintain,
    merge_manifests,
    register_pin_source,
    remove_orphans,
    unregister_pin_source,
)
from catalog.maintenance_worker import (
    WORKER_NICENESS,
    MaintenanceWorker,
    TableRef,
    WorkerDied,
    apply_commit_request,
    rewrite_small_files,
    stage_manifest_merge,
    stage_rewrite,
)


def _live_files(cat: RocksCatalog) -> list[str]:
    return [local_path(t.file.file_path) for t in cat.load_table("ns.t").scan().plan_files()]


def test_compaction_keeps_rows_and_old_snapshots_readable(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    appender = Appender(catalog)
    for i in range(30):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    before = catalog.load_table("ns.t")
    old_snapshot = before.current_snapshot()
    assert old_snapshot is not None
    report = compact(appender, ("ns", "t"), worker=worker)
    assert report.compacted_files == 30 and report.written_files == 1
    after = catalog.load_table("ns.t")
    assert len(_live_files(catalog)) == 1
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == list(range(300))
    # a reader pinned to the pre-compaction snapshot still reads the same rows
    assert after.scan(snapshot_id=old_snapshot.snapshot_id).to_arrow().num_rows == 300
    record = catalog.log.get(catalog.log.head())
    assert record is not None and record.operation == "replace"
    # Compaction changes no row a reader sees (issue 38: counts are what readers see).
    assert (record.added_rows, record.deleted_rows, record.data_change) == (0, 0, False)
    assert len(after.current_snapshot().manifests(after.io)) <= 2  # type: ignore[union-attr]


def test_manifests_are_merged(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    catalog.load_table("ns.t").transaction().set_properties(
        {"icefloe.compaction.small-file-bytes": "1"}
    ).commit_transaction()
    appender = Appender(catalog)
    for i in range(20):
        appender.append_table(("ns", "t"), id_rows(5, i * 5))
    report = compact(appender, ("ns", "t"), worker=worker)
    assert report.compacted_files == 0 and report.merged_manifests == 20
    table = catalog.load_table("ns.t")
    assert len(table.current_snapshot().manifests(table.io)) == 1  # type: ignore[union-attr]
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(100))


def test_expiry_respects_window_newest_and_pins(catalog: RocksCatalog) -> None:
    appender = Appender(catalog)
    for i in range(5):
        appender.append_table(("ns", "t"), id_rows(1, i))
    table = catalog.load_table("ns.t")
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    # inside the default retention window nothing goes
    assert expire_snapshots(appender, ("ns", "t")) == 0
    pinned = snapshots[1]

    def pin(ns: tuple[str, ...], t: str) -> set[int]:
        return {pinned} if (ns, t) == (("ns",), "t") else set()

    register_pin_source(pin)
    try:
        far_future = int(time.time() * 1000) + 10**9
        assert expire_snapshots(appender, ("ns", "t"), now_ms=far_future) == 3
    finally:
        unregister_pin_source(pin)
    left = {s.snapshot_id for s in catalog.load_table("ns.t").metadata.snapshots}
    assert left == {pinned, snapshots[-1]}
    assert catalog.log.get(catalog.log.head()).operation == "expire"  # type: ignore[union-attr]
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 5


def test_a_snapshot_cap_of_zero_keeps_all_by_count(catalog: RocksCatalog) -> None:
    """``icefloe.snapshots.retain = 0`` keeps every snapshot (docs/catalog.md): maintenance's
    expiry reads it as the commit path does, not as "keep the newest one"."""
    catalog.load_table("ns.t").transaction().set_properties(
        {"icefloe.snapshots.retain": "0"}
    ).commit_transaction()
    appender = Appender(catalog)
    for i in range(5):
        appender.append_table(("ns", "t"), id_rows(1, i))
    assert expire_snapshots(appender, ("ns", "t")) == 0
    assert len(catalog.load_table("ns.t").metadata.snapshots) == 5
    catalog.load_table("ns.t").transaction().set_properties(
        {"icefloe.snapshots.retain": "2"}
    ).commit_transaction()
    assert expire_snapshots(appender, ("ns", "t")) == 3
    assert len(catalog.load_table("ns.t").metadata.snapshots) == 2


def test_orphans_removed_only_when_unreferenced_and_old(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    appender = Appender(catalog)
    appender.append_table(("ns", "t"), id_rows(10, 0))
    data_dir = Path(local_path(catalog.warehouse), "ns", "t", "data")
    old_orphan = data_dir / "left-by-a-crash.parquet"
    old_orphan.write_bytes(b"x")
    os.utime(old_orphan, (time.time() - 7200, time.time() - 7200))
    fresh_orphan = data_dir / "being-written.parquet"
    fresh_orphan.write_bytes(b"x")
    referenced = set(_live_files(catalog))
    assert remove_orphans(appender, ("ns", "t"), grace_s=3600, worker=worker) == 1
    assert not old_orphan.exists() and fresh_orphan.exists()
    assert all(Path(p).exists() for p in referenced)
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 10


def test_full_maintain_after_expiry_deletes_replaced_small_files(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    catalog.load_table("ns.t").transaction().set_properties(
        {"history.expire.max-snapshot-age-ms": "0"}
    ).commit_transaction()
    appender = Appender(catalog)
    for i in range(10):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    report = maintain(appender, ("ns", "t"), orphan_grace_s=0, worker=worker)
    assert report.compacted_files == 10 and report.rows == 100
    assert report.expired_snapshots >= 10 and report.removed_orphans >= 10
    table = catalog.load_table("ns.t")
    on_disk = sorted(str(p) for p in Path(local_path(catalog.warehouse), "ns", "t", "data").glob("*.parquet"))
    assert on_disk == sorted(_live_files(catalog))
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(100))


def test_maintain_leaves_no_manifest_of_only_deleted_files(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    """After an explicit maintain the current snapshot lists only manifests with live files: the
    compaction's DELETED entries stay in its own snapshot (readable, for incremental readers),
    and scans of the table no longer decode them."""
    appender = Appender(catalog)
    for i in range(12):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    report = maintain(appender, ("ns", "t"), orphan_grace_s=3600, worker=worker)
    assert report.compacted_files == 12 and report.rows == 120
    table = catalog.load_table("ns.t")
    current = table.current_snapshot()
    assert current is not None
    manifests = current.manifests(table.io)
    assert manifests and all(m.has_added_files() or m.has_existing_files() for m in manifests)
    rewrite = table.snapshot_by_id(current.parent_snapshot_id)  # type: ignore[arg-type]
    assert rewrite is not None and rewrite.summary is not None and rewrite.summary.operation.value == "overwrite"
    assert sum(m.deleted_files_count for m in rewrite.manifests(table.io)) == 12
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(120))
    assert catalog.log.get(catalog.log.head()).operation == "replace"  # type: ignore[union-attr]
    again = maintain(appender, ("ns", "t"), orphan_grace_s=3600, worker=worker)  # nothing left to do
    assert again.compacted_files == 0 and again.merged_manifests == 0
    assert catalog.load_table("ns.t").current_snapshot().snapshot_id == current.snapshot_id  # type: ignore[union-attr]


def test_compaction_while_writers_and_readers_run(catalog: RocksCatalog, worker: MaintenanceWorker) -> None:
    appender = Appender(catalog)
    stop = threading.Event()
    problems: list[str] = []
    committed: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in range(40):
            appender.append_table(("ns", "t"), id_rows(10, (w * 40 + i) * 10))
            with lock:
                committed.append(10)

    def reader() -> None:
        while not stop.is_set():
            with lock:
                floor = sum(committed)
            ids = catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist()
            if len(ids) != len(set(ids)):
                problems.append("a scan saw duplicated rows")
            if len(ids) < floor:
                problems.append(f"a scan lost rows: {len(ids)} < {floor}")

    def compactor() -> None:
        while not stop.is_set():
            compact(appender, ("ns", "t"), min_input_files=4, worker=worker)
            time.sleep(0.01)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    helpers = [threading.Thread(target=reader), threading.Thread(target=compactor)]
    for t in writers + helpers:
        t.start()
    for t in writers:
        t.join(timeout=240)
    stop.set()
    for t in helpers:
        t.join(timeout=60)
    assert not problems, problems[:3]
    ids = sorted(catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(4 * 40 * 10))
    assert any(r.operation == "replace" for r in catalog.log.read(0))



def test_orphan_removal_spares_a_renamed_table_sharing_the_folder(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    appender.append_table(("ns", "t"), id_rows(10, 0))
    catalog.rename_table("ns.t", "ns.moved")  # files stay under ns/t
    catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))  # same folder again
    appender.append_table(("ns", "t"), id_rows(3, 100))
    assert remove_orphans(appender, ("ns", "t"), grace_s=0, worker=worker) == 0
    assert catalog.load_table("ns.moved").scan().to_arrow().num_rows == 10
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 3


def test_a_dead_worker_process_is_replaced(catalog: RocksCatalog) -> None:
    appender = Appender(catalog)
    for i in range(4):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    worker = MaintenanceWorker()
    try:
        with pytest.raises(WorkerDied):
            worker.run(os._exit, 1)
        report = compact(appender, ("ns", "t"), min_input_files=2, worker=worker)
    finally:
        worker.close()
    assert report.compacted_files == 4 and report.written_files == 1
    assert sorted(catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist()) == list(range(40))
    with pytest.raises(WorkerDied, match="closed"):
        worker.run(os.getpid)


def test_closing_the_worker_stops_a_call_in_progress() -> None:
    worker = MaintenanceWorker()
    assert worker.run(os.getpid) != os.getpid()  # it runs elsewhere
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            worker.run(time.sleep, 60)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.3)
    started = time.monotonic()
    worker.close()
    caller.join(timeout=10)
    assert not caller.is_alive() and time.monotonic() - started < 10
    assert len(outcome) == 1 and isinstance(outcome[0], WorkerDied)


def test_worker_errors_come_back_as_raised() -> None:
    worker = MaintenanceWorker()
    try:
        with pytest.raises(ValueError, match="invalid literal"):
            worker.run(int, "not a number")
        assert worker.run(int, "42") == 42  # the same process goes on
    finally:
        worker.close()


def test_a_staged_commit_on_a_version_that_moved_on_commits_nothing(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    for i in range(20):
        appender.append_table(("ns", "t"), id_rows(5, i * 5))
    stale = catalog.load_table("ns.t")
    _, request = worker.run(stage_manifest_merge, TableRef.of(catalog, stale), 2)
    assert request is not None
    appender.append_table(("ns", "t"), id_rows(5, 100))
    head = catalog.log.head()
    with pytest.raises(CommitFailedException):
        apply_commit_request(catalog, stale, request)
    assert catalog.log.head() == head
    table = catalog.load_table("ns.t")
    assert len(table.current_snapshot().manifests(table.io)) == 21  # type: ignore[union-attr]
    # staged again on the current version, it lands
    assert merge_manifests(appender, ("ns", "t"), threshold=2, worker=worker) == 21
    assert sorted(table.refresh().scan().to_arrow().column("id").to_pylist()) == list(range(105))


def test_staging_a_rewrite_whose_inputs_were_replaced_gives_no_request(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    for i in range(4):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    table = catalog.load_table("ns.t")
    rewrite = worker.run(rewrite_small_files, TableRef.of(catalog, table), 1 << 30, 2, 100)
    assert rewrite is not None and len(rewrite.old) == 4
    catalog.load_table("ns.t").overwrite(id_rows(3, 1000))  # the inputs are gone
    assert worker.run(stage_rewrite, TableRef.of(catalog, catalog.load_table("ns.t")), rewrite) is None


def test_compaction_that_loses_to_an_overwrite_commits_nothing_and_deletes_its_files(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    for i in range(4):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    data = Path(local_path(catalog.warehouse), "ns", "t", "data")
    before = set(data.glob("*.parquet"))
    # An overwrite lands between the rewrite and its staging.
    racing = Interleaved(worker, before={stage_rewrite: lambda: catalog.load_table("ns.t").overwrite(id_rows(3, 1000))})
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=racing)
    assert report.compacted_files == report.written_files == 0
    assert [r.operation for r in catalog.log.read(0)][-1] == "overwrite"
    assert catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist() == [1000, 1001, 1002]
    # on disk: the old files and the overwrite's one file, none from the lost rewrite
    assert len(set(data.glob("*.parquet")) - before) == 1


def test_an_orphan_sweep_never_takes_the_files_of_a_rewrite_in_flight(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    for i in range(6):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))
    removed: list[int] = []
    sweep = threading.Thread(target=lambda: removed.append(remove_orphans(appender, ("ns", "t"), 0, worker)))

    def start_sweep() -> None:  # grace 0, while the rewrite's new files are not committed
        sweep.start()
        sweep.join(timeout=0.5)  # it must wait for the rewrite's commit

    report = compact(
        appender, ("ns", "t"), min_input_files=2, worker=Interleaved(worker, after={rewrite_small_files: start_sweep})
    )
    sweep.join(timeout=60)
    assert report.compacted_files == 6 and report.written_files == 1
    assert all(Path(p.removeprefix("file://")).exists() for p in _live_files(catalog))
    assert sorted(catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist()) == list(range(60))
    assert removed == [0]  # the six replaced files are still referenced by older snapshots


def test_compaction_retries_when_its_version_is_gone_before_the_worker_reads_it(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    appender = Appender(catalog)
    for i in range(4):
        appender.append_table(("ns", "t"), id_rows(10, i * 10))

    def move_on() -> None:  # as while a worker process starts under a busy writer
        for i in range(25):  # beyond write.metadata.previous-versions-max (20)
            appender.append_table(("ns", "t"), id_rows(1, 1000 + i))

    racing = Interleaved(worker, before={rewrite_small_files: move_on})
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=racing)
    assert racing.calls[:2] == ["rewrite_small_files", "rewrite_small_files"]
    assert report.compacted_files == 29 and report.written_files == 1
    expected = list(range(40)) + list(range(1000, 1025))
    assert sorted(catalog.load_table("ns.t").scan().to_arrow().column("id").to_pylist()) == expected


def test_the_worker_process_runs_at_a_lower_cpu_priority(process_worker: MaintenanceWorker) -> None:
    # Background compaction must not take CPU from the serving process on a busy machine.
    assert process_worker.run(os.nice, 0) == min(19, os.nice(0) + WORKER_NICENESS)


def test_compaction_reads_files_of_the_current_schema_in_their_own_types(catalog: RocksCatalog) -> None:
    # Files all written with the table's current schema are read as one dataset in their own
    # Arrow types (no per-file scan, no cast to pyiceberg's large types) and keep every value.
    from catalog.maintenance_worker import _rows_of, live_data_files

    catalog.drop_table("ns.t")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    catalog.create_table("ns.t", schema)
    appender = Appender(catalog)
    for i in range(5):
        appender.append_table(("ns", "t"), pa.table({"id": [i * 2, i * 2 + 1], "name": [f"n{i}", None]}, schema=schema))
    table = catalog.load_table("ns.t")
    input_schema, batches = _rows_of(table, live_data_files(table))
    assert input_schema.field("name").type == pa.string()  # the files' type, not large_string
    rows = pa.Table.from_batches(list(batches), schema=input_schema)
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "name": f"n{i // 2}" if i % 2 == 0 else None} for i in range(10)
    ]


def test_compaction_resolves_files_of_older_schemas_by_field_id(
    catalog: RocksCatalog, worker: MaintenanceWorker
) -> None:
    # Files written before a rename and an added column do not match the current schema:
    # their columns are found by field id (the renamed one keeps its values, the added one
    # reads as null), also when files of the current schema are compacted with them.
    appender = Appender(catalog)
    for i in range(3):
        appender.append_table(("ns", "t"), id_rows(2, i * 2))
    table = catalog.load_table("ns.t")
    with table.update_schema() as update:
        update.rename_column("id", "key")
        update.add_column("note", StringType())
    for i in range(3, 5):
        appender.append_table(("ns", "t"), pa.table({"key": [i * 2, i * 2 + 1], "note": ["x", "y"]}))
    report = compact(appender, ("ns", "t"), min_input_files=2, worker=worker)
    assert report.compacted_files == 5 and report.written_files == 1
    rows = sorted(catalog.load_table("ns.t").scan().to_arrow().to_pylist(), key=lambda r: r["key"])
    assert rows == [{"key": k, "note": None if k < 6 else "xy"[k % 2]} for k in range(10)]
