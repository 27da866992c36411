"""In-process tests of the append path: rolling writer, all-or-nothing, group commit, keys."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from catalog_testlib import local_path

from catalog import RocksCatalog, writer
from catalog.append import Appender
from catalog.idempotency import idempotency_key
from catalog.schema_policy import SchemaMismatchError


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[RocksCatalog]:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    yield cat
    cat.close()


def _data(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array([f"value-{i}" for i in range(start, start + n)]),
        }
    )


def _parquet_files(cat: RocksCatalog, name: str = "t") -> list[Path]:
    return sorted(Path(local_path(cat.warehouse), "ns", name, "data").glob("*.parquet"))


def test_stream_rolls_files_at_target_size_with_stats(catalog: RocksCatalog) -> None:
    catalog.create_table(
        "ns.t",
        _data(1).schema,
        properties={"write.target-file-size-bytes": "300000", "write.parquet.row-group-limit": "20000"},
    )
    data = _data(300_000)
    result = Appender(catalog).append_stream(("ns", "t"), data.schema, data.to_batches(max_chunksize=5000))
    assert result.rows == 300_000
    table = catalog.load_table("ns.t")
    tasks = list(table.scan().plan_files())
    assert len(tasks) >= 3, "the stream was not rolled into several files"
    assert sum(t.file.record_count for t in tasks) == 300_000
    for task in tasks:
        meta = pq.read_metadata(local_path(task.file.file_path))
        assert meta.num_rows == task.file.record_count
        assert task.file.file_size_in_bytes == Path(local_path(task.file.file_path)).stat().st_size
        assert task.file.lower_bounds and task.file.upper_bounds and task.file.value_counts
        # field ids are written so that evolution and projection work
        assert meta.schema.to_arrow_schema().field("id").metadata[b"PARQUET:field_id"] == b"1"
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(300_000))
    # one commit for the whole stream
    assert [r.operation for r in catalog.log.read(0)] == ["create", "append"]


def test_broken_stream_commits_nothing_and_deletes_its_files(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema, properties={"write.parquet.row-group-limit": "1000"})

    def batches() -> Iterator[pa.RecordBatch]:
        yield from _data(50_000).to_batches(max_chunksize=1000)
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        Appender(catalog).append_stream(("ns", "t"), _data(1).schema, batches())
    assert catalog.log.head() == 1
    assert _parquet_files(catalog) == []
    assert catalog.load_table("ns.t").current_snapshot() is None


def test_long_stream_is_encoded_by_lanes_row_groups_in_turn(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema, properties={"write.parquet.row-group-limit": "10000"})
    data = _data(100_000)
    Appender(catalog).append_stream(("ns", "t"), data.schema, data.to_batches(max_chunksize=2500))
    lanes = writer.ENCODERS
    tasks = list(catalog.load_table("ns.t").scan().plan_files())
    assert len(tasks) == lanes  # one file per lane (far below the target size)
    starts: list[int] = []
    seen_lanes: list[int] = []
    for task in tasks:
        meta = pq.read_metadata(local_path(task.file.file_path))
        assert meta.num_rows == task.file.record_count
        ids = pq.read_table(local_path(task.file.file_path)).column("id").to_pylist()
        # Lanes open their files from their own threads, so the files' order in the commit
        # follows the threads' scheduling: a file's lane is told by its first row group.
        lane = ids[0] // 10_000
        seen_lanes.append(lane)
        groups = [ids[i : i + 10_000] for i in range(0, len(ids), 10_000)]
        assert [meta.row_group(k).num_rows for k in range(meta.num_row_groups)] == [10_000] * len(groups)
        for k, group in enumerate(groups):
            # Row group n of the stream went to lane n % lanes, in stream order.
            assert group == list(range(group[0], group[0] + 10_000))
            assert group[0] == (k * lanes + lane) * 10_000
            starts.append(group[0])
    assert sorted(seen_lanes) == list(range(lanes))
    assert sorted(starts) == list(range(0, 100_000, 10_000))


def test_a_failing_encoder_lane_commits_nothing_and_deletes_every_file(
    catalog: RocksCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.create_table("ns.t", _data(1).schema, properties={"write.parquet.row-group-limit": "1000"})
    real_write = writer._Lane._write
    calls = []

    def failing_write(self: writer._Lane, table: pa.Table, last: bool) -> None:
        calls.append(1)
        if len(calls) == 5:
            raise OSError("disk full")
        real_write(self, table, last)

    monkeypatch.setattr(writer._Lane, "_write", failing_write)
    data = _data(50_000)
    with pytest.raises(writer.WriteAborted) as failure:
        Appender(catalog).append_stream(("ns", "t"), data.schema, data.to_batches(max_chunksize=1000))
    chain = []
    cause: BaseException | None = failure.value
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    assert any(isinstance(c, OSError) and "disk full" in str(c) for c in chain)
    assert catalog.log.head() == 1
    assert _parquet_files(catalog) == []
    assert catalog.load_table("ns.t").current_snapshot() is None


def test_null_in_required_column_mid_stream_commits_nothing(catalog: RocksCatalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    catalog.create_table("ns.t", schema, properties={"write.parquet.row-group-limit": "10"})
    good = pa.record_batch([pa.array(range(100), pa.int64())], names=["id"])
    bad = pa.record_batch([pa.array([1, None], pa.int64())], names=["id"])
    with pytest.raises(SchemaMismatchError, match="'id'"):
        Appender(catalog).append_stream(("ns", "t"), bad.schema, [good, bad])
    assert catalog.log.head() == 1 and _parquet_files(catalog) == []


def test_concurrent_appends_coalesce_and_each_gets_its_rows(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema)
    appender = Appender(catalog)
    results: dict[int, object] = {}
    barrier = threading.Barrier(8)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(10):
            n = 10 + w  # every writer a different size so results cannot be mixed up
            start = (w * 10 + i) * 100
            results[w * 10 + i] = (n, appender.append_table(("ns", "t"), _data(n, start)))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 80
    for n, result in results.values():  # type: ignore[misc]
        assert result.rows == n and not result.duplicate
    seqs = {r.commit_seq for _, r in results.values()}  # type: ignore[misc]
    assert len(seqs) < 80, "no appends were coalesced"
    records = [r for r in catalog.log.read(0) if r.operation == "append"]
    assert len(records) == len(seqs)
    assert sum(r.added_rows or 0 for r in records) == sum(n for n, _ in results.values())  # type: ignore[misc]
    for seq in seqs:
        group = [r for _, r in results.values() if r.commit_seq == seq]  # type: ignore[misc]
        record = catalog.log.get(seq)
        assert record is not None and record.added_rows == sum(r.rows for r in group)
        assert {r.snapshot_id for r in group} == {record.snapshot_id}


def test_idempotency_key_is_written_with_the_commit_and_survives_reopen(tmp_path: Path) -> None:
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    cat.create_table("ns.t", _data(1).schema)
    first = Appender(cat).append_table(("ns", "t"), _data(10), idempotency_key="abc")
    assert cat.store.get(idempotency_key(("ns",), "t", "abc")) is not None
    cat.close()
    cat = RocksCatalog("test", warehouse=str(tmp_path / "wh"))
    try:
        again = Appender(cat).append_table(("ns", "t"), _data(10), idempotency_key="abc")
        assert again.to_json() == {**first.to_json(), "duplicate": True}
        assert cat.log.head() == 2
        # same key, other table: independent
        cat.create_table("ns.u", _data(1).schema)
        other = Appender(cat).append_table(("ns", "u"), _data(3), idempotency_key="abc")
        assert not other.duplicate and other.rows == 3
        assert len(_parquet_files(cat)) == 1
    finally:
        cat.close()


def test_same_key_in_one_group_commits_once(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema)
    appender = Appender(catalog)
    out: list[object] = []
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        out.append(appender.append_table(("ns", "t"), _data(5), idempotency_key="same"))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(out) == 6
    assert sum(1 for r in out if not r.duplicate) == 1  # type: ignore[attr-defined]
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 5
    assert len({(r.commit_seq, r.snapshot_id) for r in out}) == 1  # type: ignore[attr-defined]


def test_expired_idempotency_keys_are_removed(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema)
    appender = Appender(catalog, idempotency_retention_s=0.0)
    appender.append_table(("ns", "t"), _data(1), idempotency_key="old")
    assert appender.idempotency.expire() == 1
    assert not appender.append_table(("ns", "t"), _data(1), idempotency_key="old").duplicate


def test_evolving_append_commits_schema_and_rows_together(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", _data(1).schema)
    wider = _data(3).append_column("extra", pa.array(["a", "b", "c"]))
    result = Appender(catalog).append_table(("ns", "t"), wider, schema_policy="evolve")
    records = [r for r in catalog.log.read(0)]
    assert [r.operation for r in records] == ["create", "append"]  # one commit, no separate "schema"
    table = catalog.load_table("ns.t")
    assert table.schema().find_field("extra").field_id == 3
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == result.snapshot_id
    assert snapshot.schema_id == table.schema().schema_id
    assert table.scan().to_arrow().column("extra").to_pylist() == ["a", "b", "c"]


def test_failed_evolving_append_leaves_the_schema_alone(catalog: RocksCatalog) -> None:
    catalog.create_table("ns.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("extra", pa.string())])

    def broken() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch([pa.array([1]), pa.array(["x"])], schema=schema)
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        Appender(catalog).append_stream(("ns", "t"), schema, broken(), schema_policy="evolve")
    nulls = pa.record_batch([pa.array([1, None]), pa.array(["x", "y"])], schema=schema)
    with pytest.raises(SchemaMismatchError, match="'id'"):
        Appender(catalog).append_stream(("ns", "t"), schema, [nulls], schema_policy="evolve")
    with pytest.raises(SchemaMismatchError, match="'extra' is not in the table"):  # the default: no evolution
        Appender(catalog).append_stream(("ns", "t"), schema, [nulls])
    table = catalog.load_table("ns.t")
    assert [f.name for f in table.schema().fields] == ["id"]
    assert catalog.log.head() == 1 and _parquet_files(catalog) == []


def test_concurrent_evolutions_same_change_both_land_different_change_one_aborts(catalog: RocksCatalog) -> None:
    from catalog.append import ConcurrentSchemaChangeError
    from catalog.append_schema import stage_schema

    catalog.create_table("ns.t", _data(1).schema)
    appender = Appender(catalog)
    base = catalog.load_table("ns.t")
    plan_x = stage_schema(base, _plan_for(base, "x"))
    plan_y = stage_schema(base, _plan_for(base, "y"))
    first = appender.append_table(("ns", "t"), _data(2).append_column("x", pa.array(["a", "b"])),
                                  schema_policy="evolve")
    assert first.rows == 2
    # a second append staged against the old base with the same new column still fits
    same = appender._commit_files(
        base, ("ns", "t"), _write(appender, base, plan_x, "x"), 1, None, plan_x
    )
    assert same.rows == 1
    # one staged against the old base with a different column would reuse x's field id
    with pytest.raises(ConcurrentSchemaChangeError):
        appender._commit_files(base, ("ns", "t"), _write(appender, base, plan_y, "y"), 1, None, plan_y)
    table = catalog.load_table("ns.t")
    assert [f.name for f in table.schema().fields] == ["id", "v", "x"]
    assert table.scan().to_arrow().num_rows == 3


def _plan_for(table: object, column: str) -> object:
    from catalog.schema_policy import plan

    t = table  # a pyiceberg Table
    wider = _data(1).append_column(column, pa.array(["z"])).schema
    return plan(t.schema(), wider, "evolve", t.metadata.format_version)  # type: ignore[attr-defined]


def _write(appender: Appender, table: object, staged: object, column: str) -> list[object]:
    from catalog.writer import DataFileWriter

    data = _data(1, start=100).append_column(column, pa.array(["z"]))
    writer = DataFileWriter(staged.metadata, table.io, data.schema)  # type: ignore[attr-defined]
    for batch in data.to_batches():
        writer.write(batch)
    return writer.finish()  # type: ignore[return-value]


def test_every_file_the_commit_references_is_fsynced_before_the_pointer_moves(
    catalog: RocksCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import catalog.durable_io as durable_io
    from catalog.store import RocksStore

    catalog.create_table("ns.t", _data(1).schema)
    synced: set[str] = set()
    real_fsync = durable_io.fsync_path
    synced_at_write: list[set[str]] = []
    real_write = RocksStore.write

    def recording_fsync(path: str) -> None:
        synced.add(os.path.abspath(path))
        real_fsync(path)

    def recording_write(self: RocksStore, *args: object, **kwargs: object) -> None:
        synced_at_write.append(set(synced))
        real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(durable_io, "fsync_path", recording_fsync)
    monkeypatch.setattr(RocksStore, "write", recording_write)
    Appender(catalog).append_table(("ns", "t"), _data(10))
    needed = _files_of_current_snapshot(catalog)
    needed |= {os.path.dirname(p) for p in needed}
    before_pointer = synced_at_write[-1]
    assert {os.path.abspath(p) for p in needed} <= before_pointer


def test_each_file_of_a_commit_is_fsynced_once_while_the_commit_proceeds(
    catalog: RocksCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fsyncs start as the files close (durable_io.PendingSync); the commit only waits.
    import collections

    import catalog.durable_io as durable_io

    catalog.create_table("ns.t", _data(1).schema)
    calls: collections.Counter[str] = collections.Counter()
    real_fsync = durable_io.fsync_path

    def counting_fsync(path: str) -> None:
        calls[os.path.abspath(path)] += 1
        real_fsync(path)

    monkeypatch.setattr(durable_io, "fsync_path", counting_fsync)
    Appender(catalog).append_table(("ns", "t"), _data(10))
    files = {os.path.abspath(p.removeprefix("file://")) for p in _files_of_current_snapshot(catalog)}
    assert {p: calls[p] for p in files} == dict.fromkeys(files, 1)


def _files_of_current_snapshot(catalog: RocksCatalog) -> set[str]:
    """Every file ns.t's current snapshot needs: metadata, manifest list, manifests, data."""
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    files = {table.metadata_location, snapshot.manifest_list}
    files |= {m.manifest_path for m in snapshot.manifests(table.io)}
    return {local_path(f) for f in files | {t.file.file_path for t in table.scan().plan_files()}}


def test_partitioned_table_append(catalog: RocksCatalog) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "v", StringType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="v"))
    catalog.create_table("ns.p", schema, partition_spec=spec)
    data = pa.table({"id": pa.array(range(6), pa.int64()), "v": pa.array(["a", "b", "a", "c", "b", "a"])})
    result = Appender(catalog).append_table(("ns", "p"), data)
    assert result.rows == 6
    table = catalog.load_table("ns.p")
    files = list(table.scan().plan_files())
    assert len(files) == 3 and {f.file.partition[0] for f in files} == {"a", "b", "c"}
    assert sorted(table.scan(row_filter="v == 'a'").to_arrow().column("id").to_pylist()) == [0, 2, 5]


def _layouts(cat: RocksCatalog, name: str) -> list[tuple[str, list[int]]]:
    """(codec, rows of each row group) of every data file of ``ns.<name>``; each file must carry
    the page index (a filter on a sorted key reads only the pages that may match)."""
    found = []
    for path in _parquet_files(cat, name):
        meta = pq.read_metadata(path)
        assert all(meta.row_group(k).column(c).has_column_index and meta.row_group(k).column(c).has_offset_index
                   for k in range(meta.num_row_groups) for c in range(meta.num_columns)), path
        found.append((meta.row_group(0).column(0).compression,
                      [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]))
    return found


def test_parquet_layout_follows_the_tables_properties_and_icefloes_defaults(catalog: RocksCatalog) -> None:
    data = _data(200_000)  # about 4.6 MB of Arrow data
    catalog.create_table("ns.plain", data.schema)
    catalog.create_table("ns.tuned", data.schema, properties={
        "write.parquet.compression-codec": "zstd", "write.parquet.row-group-size-bytes": str(1024 * 1024)})
    catalog.create_table("ns.rows", data.schema, properties={
        "write.parquet.compression-codec": "gzip", "write.parquet.row-group-limit": "30000"})
    for name in ("plain", "tuned", "rows"):
        Appender(catalog).append_stream(("ns", name), data.schema, data.to_batches(max_chunksize=10_000))
        got = catalog.load_table(f"ns.{name}").scan().to_arrow().sort_by("id")
        assert got.column("id").to_pylist() == list(range(200_000))
    plain = _layouts(catalog, "plain")
    assert {codec for codec, _ in plain} == {writer.DEFAULT_COMPRESSION.upper()}
    assert sum(len(groups) for _, groups in plain) == 1  # under the default 16 MiB
    tuned = _layouts(catalog, "tuned")
    assert {codec for codec, _ in tuned} == {"ZSTD"}
    groups = [n for _, g in tuned for n in g]
    assert sum(groups) == 200_000 and len(groups) >= 4  # 1 MiB of Arrow data per row group
    rows = _layouts(catalog, "rows")
    assert {codec for codec, _ in rows} == {"GZIP"}
    assert sorted(n for _, g in rows for n in g) == sorted([30_000] * 6 + [20_000])


def test_parquet_layout_defaults_split_a_large_stream_by_bytes() -> None:
    kwargs, rows, size = writer.parquet_layout({})
    assert kwargs["compression"] == writer.DEFAULT_COMPRESSION
    assert rows == 1_048_576 and size == writer.DEFAULT_ROW_GROUP_BYTES
    kwargs, rows, size = writer.parquet_layout({"write.parquet.row-group-size-bytes": "0",
                                                "write.parquet.compression-codec": "uncompressed"})
    assert kwargs["compression"] == "none" and size == writer.DEFAULT_ROW_GROUP_BYTES
