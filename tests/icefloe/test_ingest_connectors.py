"""The files and HTTP connectors on their own (real folders, a real HTTP server), and the runner
over a real embedded catalog: globbing, completion markers, rewritten files, retries, pacing,
backfill, and a re-created target table."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_sources import HttpSource

from catalog import RocksCatalog
from catalog.append import Appender
from icefloe.ingest import BackfillRange, Checkpoint, InvalidOptions, SourceUnavailable
from icefloe.ingest.files import FilesConnector
from icefloe.ingest.http_json import HttpJsonConnector
from icefloe.ingest.runner import IngestRunner
from icefloe.ingest.sink import CatalogSink

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.fixture
def appender(tmp_path: Path) -> Iterator[Appender]:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})
    catalog.create_namespace(("ns",))
    catalog.create_table(("ns", "t"), schema=SCHEMA)
    try:
        yield Appender(catalog)
    finally:
        catalog.close()


def ids(appender: Appender) -> list[int]:
    return sorted(appender.catalog.load_table(("ns", "t")).scan().to_arrow().column("id").to_pylist())


def write(path: Path, first: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    numbers = range(first, first + count)
    pq.write_table(pa.table({"id": list(numbers), "name": [f"n{i}" for i in numbers]}), path)


def names(connector: Any, checkpoint: Checkpoint | None = None) -> list[str]:
    connector.open(checkpoint or Checkpoint())
    return [e.partition for e in connector.read(10**9)]


def test_files_pattern_hidden_files_and_marker(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src / "2026/a.parquet", 0, 1)
    write(src / "2026/b.pq", 1, 1)
    write(src / "other/c.parquet", 2, 1)
    write(src / "2026/.hidden.parquet", 3, 1)
    write(src / "2026/_tmp.parquet", 4, 1)
    (src / "2026/notes.txt").write_text("not data")
    assert sorted(names(FilesConnector({"path": str(src), "pattern": "2026/*"}))) == ["2026/a.parquet", "2026/b.pq"]
    marked = FilesConnector({"path": str(src), "marker": "_SUCCESS"})
    assert names(marked) == []  # no folder is complete yet
    (src / "other/_SUCCESS").write_text("")
    assert names(marked) == ["other/c.parquet"]


def test_files_rewritten_file_policy(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src / "a.parquet", 0, 2)
    connector = FilesConnector({"path": str(src)})
    connector.open(Checkpoint())
    [first] = list(connector.read(100))
    done = Checkpoint().advanced(first)
    assert names(FilesConnector({"path": str(src)}), done) == []  # same version: taken once
    write(src / "a.parquet", 10, 3)  # rewritten in place: a new version
    os.utime(src / "a.parquet", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert names(FilesConnector({"path": str(src)}), done) == ["a.parquet"]
    assert names(FilesConnector({"path": str(src), "rewritten": "ignore"}), done) == []


def test_files_options_and_down(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match="unknown files option"):
        FilesConnector({"path": str(tmp_path), "colour": "red"})
    with pytest.raises(InvalidOptions, match="format must be"):
        FilesConnector({"path": str(tmp_path), "format": "xml"})
    connector = FilesConnector({"path": str(tmp_path / "missing")})
    connector.open(Checkpoint())
    with pytest.raises(SourceUnavailable, match="cannot list"):
        list(connector.read(10))
    assert connector.health().state.value == "down"


def test_http_retries_429_and_5xx_and_paces_requests() -> None:
    source = HttpSource("cursor", page_size=2)
    try:
        source.add([{"id": i, "name": f"n{i}"} for i in range(5)])
        source.api.fail_next = [429, 503]
        connector = HttpJsonConnector({**source.options(), "rate": 20, "retries": 3})
        connector.open(Checkpoint())
        envelopes = list(connector.read(100))
        assert [r["id"] for e in envelopes for r in e.rows.to_pylist()] == [0, 1, 2, 3, 4]
        assert source.api.requests == 5  # 2 refused + 3 pages
        source.api.fail_next = [503] * 3
        connector.open(Checkpoint())
        with pytest.raises(SourceUnavailable, match="HTTP 503"):
            list(connector.read(100))
        assert connector.health().state.value == "down"
    finally:
        source.close()


def test_http_rate_limit_paces_requests() -> None:
    """At most ``rate`` requests a second: N requests cannot take less than (N-1)/rate (a lower
    bound that sleeping guarantees, whatever the machine's load)."""
    source = HttpSource("link", page_size=1)
    try:
        source.add([{"id": i, "name": "x"} for i in range(6)])
        connector = HttpJsonConnector({**source.options(), "rate": 10})
        connector.open(Checkpoint())
        started = time.monotonic()
        assert len([e for e in connector.read(100) if e.rows.num_rows]) == 6
        elapsed = time.monotonic() - started
        assert source.api.requests == 6
        assert elapsed >= 5 / 10
    finally:
        source.close()


def test_http_backfill_is_idempotent_and_takes_changed_pages(appender: Appender) -> None:
    source = HttpSource("cursor", page_size=2)
    try:
        source.add([{"id": i, "name": f"n{i}"} for i in range(6)])
        connector = HttpJsonConnector(source.options())
        runner = IngestRunner("api", connector, CatalogSink(appender, "ns.t"))
        assert runner.run_once().rows == 6
        live = runner.status().step
        # Backfill from the second page: those pages again, once.
        start = f"http://127.0.0.1:{source.port}/items?cursor=2"
        assert runner.run_once(BackfillRange(start, None)).rows == 4
        assert runner.run_once(BackfillRange(start, None)).rows == 0  # idempotent
        with source.api.lock:
            source.api.records[5] = {"id": 5, "name": "changed"}
        assert runner.run_once(BackfillRange(start, None)).rows == 2  # the changed page, whole
        assert runner.status().step == live  # the live checkpoint did not move
        assert runner.run_once().rows == 0
        with pytest.raises(InvalidOptions, match="backfill range"):
            runner.run_once(BackfillRange("http://elsewhere.example/items", None))
    finally:
        source.close()
    assert ids(appender) == [0, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5]


def test_files_backfill_without_moving_the_live_checkpoint(appender: Appender, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src / "a/1.parquet", 0, 2)
    write(src / "b/2.parquet", 2, 2)
    runner = IngestRunner("files", FilesConnector({"path": str(src)}), CatalogSink(appender, "ns.t"))
    assert runner.run_once().rows == 4
    assert runner.run_once(BackfillRange("b/*")).rows == 2
    assert runner.run_once(BackfillRange("b/*")).rows == 0
    assert runner.status().step == 1
    assert ids(appender) == [0, 1, 2, 2, 3, 3]


def test_target_table_created_again_starts_over(appender: Appender, tmp_path: Path) -> None:
    """A re-created table has no checkpoint: the connector's first commit into it is a commit, not
    a duplicate of the dropped table's first one (the pass used to loop re-reading forever)."""
    src = tmp_path / "src"
    write(src / "a.parquet", 0, 3)
    runner = IngestRunner("files", FilesConnector({"path": str(src)}), CatalogSink(appender, "ns.t"))
    assert runner.run_once().rows == 3
    appender.catalog.drop_table(("ns", "t"))
    appender.catalog.create_table(("ns", "t"), schema=SCHEMA)
    assert runner.run_once().rows == 3
    assert ids(appender) == [0, 1, 2]


def test_files_from_an_s3_prefix(s3_server: Any, appender: Appender, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files connector on an ``s3://`` prefix of a real S3 server: each object once."""
    import uuid

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    prefix = f"icefloe-test/src-{uuid.uuid4().hex[:8]}"
    fs = s3_server.filesystem()
    for index in range(3):
        numbers = range(index * 10, index * 10 + 10)
        pq.write_table(pa.table({"id": list(numbers), "name": [f"n{i}" for i in numbers]}),
                       f"{prefix}/day={index}/part.parquet", filesystem=fs)
    connector = FilesConnector({"path": f"s3://{prefix}", "s3_endpoint": s3_server.endpoint})
    runner = IngestRunner("s3", connector, CatalogSink(appender, "ns.t"))
    assert runner.run_once().rows == 30
    assert runner.run_once().rows == 0
    assert sorted(runner.status().positions) == [f"day={i}/part.parquet" for i in range(3)]
    assert ids(appender) == list(range(30))
    assert connector.source_uri() == f"s3://{prefix}"


def test_the_checkpoint_survives_snapshot_expiry(appender: Appender, tmp_path: Path) -> None:
    """Paused while other writers move the table on, past the retention window: expiry keeps the
    snapshot holding the connector's checkpoint, so it resumes at its place (nothing taken twice)."""
    import time as clock

    from catalog.maintenance import expire_snapshots

    src = tmp_path / "src"
    write(src / "a.parquet", 0, 3)
    runner = IngestRunner("files", FilesConnector({"path": str(src)}), CatalogSink(appender, "ns.t"))
    assert runner.run_once().rows == 3
    for k in range(4):
        appender.append_table(("ns", "t"), pa.table({"id": [100 + k], "name": ["other"]}, schema=SCHEMA))
    expired = expire_snapshots(appender, ("ns", "t"), now_ms=int(clock.time() * 1000) + 10**9)
    assert expired == 3  # the other writer's older snapshots, not the checkpoint (nor the current one)
    write(src / "b.parquet", 3, 2)
    restarted = IngestRunner("files", FilesConnector({"path": str(src)}), CatalogSink(appender, "ns.t"))
    assert restarted.run_once().rows == 2
    assert ids(appender) == [0, 1, 2, 3, 4, 100, 101, 102, 103]


def test_files_checkpoint_stays_bounded_with_a_watermark(appender: Appender, tmp_path: Path) -> None:
    src = tmp_path / "src"
    base = time.time_ns() - 10**12
    for index in range(10):
        write(src / f"f{index}.parquet", index * 2, 2)
        os.utime(src / f"f{index}.parquet", ns=(base, base + index * 10**9))
    options = {"path": str(src), "max_tracked": 4}
    runner = IngestRunner("files", FilesConnector(options), CatalogSink(appender, "ns.t"), max_rows=3)
    assert runner.run_once().rows == 20
    positions = runner.status().positions
    assert len(positions) <= 5 and "" in positions  # at most 4 files named, plus the watermark
    restarted = IngestRunner("files", FilesConnector(options), CatalogSink(appender, "ns.t"))
    assert restarted.run_once().rows == 0  # the folded files count as taken
    write(src / "f0.parquet", 100, 1)  # an old file rewritten now: a new mtime, past the watermark
    write(src / "new.parquet", 200, 1)
    assert restarted.run_once().rows == 2
    assert ids(appender) == [*range(20), 100, 200]


def test_source_transactions_are_never_split_across_commits(appender: Appender) -> None:
    """Transactions of 3 envelopes, reads of 2 envelopes: every commit holds whole transactions,
    and the tail a read cut off is read again, whole, in the next commit."""
    from ingest_example_connector import Transactions

    connector = Transactions({"count": 4, "size": 3})
    runner = IngestRunner("tx", connector, CatalogSink(appender, "ns.t"), max_rows=2)
    stats = runner.run_once()
    assert stats.rows == 12
    table = appender.catalog.load_table(("ns", "t"))
    for snapshot in table.metadata.snapshots:
        rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        assert rows.num_rows % 3 == 0  # whole transactions only, at every snapshot
    assert ids(appender) == list(range(1, 13))


def test_the_docs_example_connector_resumes_at_its_checkpoint(appender: Appender) -> None:
    from ingest_example_connector import Countdown

    first = IngestRunner("count", Countdown({"start": 5}), CatalogSink(appender, "ns.t"), max_rows=2)
    assert first.run_once().rows == 5
    again = IngestRunner("count", Countdown({"start": 5}), CatalogSink(appender, "ns.t"))
    assert again.run_once().rows == 0
    assert ids(appender) == [1, 2, 3, 4, 5]


def test_a_large_parquet_file_is_taken_a_few_row_groups_at_a_time(appender: Appender, tmp_path: Path) -> None:
    """Memory stays bounded by the commit size, and a pass interrupted inside a file resumes at
    the row group after the last committed one."""
    src = tmp_path / "src"
    src.mkdir()
    numbers = list(range(50))
    pq.write_table(pa.table({"id": numbers, "name": [f"n{i}" for i in numbers]}), src / "big.parquet",
                   row_group_size=10)
    connector = FilesConnector({"path": str(src)})
    connector.open(Checkpoint())
    parts = list(connector.read(20))
    assert [e.rows.num_rows for e in parts] == [20, 20, 10]
    version = parts[-1].position
    assert [e.position for e in parts] == [f"{version}@2", f"{version}@4", version]
    resumed = FilesConnector({"path": str(src)})
    resumed.open(Checkpoint({"big.parquet": f"{version}@2"}))  # as after a crash past the first commit
    assert [i for e in resumed.read(20) for i in e.rows.column("id").to_pylist()] == list(range(20, 50))
    runner = IngestRunner("big", FilesConnector({"path": str(src)}), CatalogSink(appender, "ns.t"), max_rows=20)
    assert runner.run_once().commits == 3
    assert ids(appender) == numbers
