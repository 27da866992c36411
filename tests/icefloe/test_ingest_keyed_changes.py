"""CDC changes applied by key: the runner folds whole source transactions into one commit of
row-level deletes plus appended rows (``catalog.keyed_changes``), in both write modes, with the
checkpoint in that same commit. In-process (a real catalog and appender, a scripted source)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.schema_policy import SchemaMismatchError
from icefloe.ingest import BackfillRange, Checkpoint, Connector, Envelope, Health, Op, State
from icefloe.ingest.runner import IngestRunner
from icefloe.ingest.sink import CatalogSink

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
Change = tuple[str, int, str | None]  # (op, id, name)


class Scripted(Connector):
    """Source transactions given as lists of (op, id, name); position = transactions taken."""

    kind = "scripted"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.transactions: list[list[Change]] = list(options["transactions"])
        self.at = 0

    def discover(self) -> pa.Schema:
        return pa.schema([("id", pa.int64()), ("name", pa.string())])

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        self.at = int(checkpoint.get("") or 0)

    def read(self, max_rows: int) -> Iterator[Envelope]:
        while self.at < len(self.transactions):
            changes = self.transactions[self.at]
            self.at += 1
            runs: list[tuple[Op, list[Change]]] = []
            for change in changes:
                op = Op(change[0])
                if runs and runs[-1][0] is op:
                    runs[-1][1].append(change)
                else:
                    runs.append((op, [change]))
            for n, (op, rows) in enumerate(runs):
                table = pa.table({"id": pa.array([r[1] for r in rows], pa.int64()),
                                  "name": pa.array([r[2] for r in rows], pa.string())})
                last = n == len(runs) - 1
                yield Envelope(table, "", str(self.at) if last else f"{self.at}.{n}", op=op, key=("id",),
                               transaction=str(self.at), transaction_end=last)

    def health(self) -> Health:
        return Health(State.UP)


@pytest.fixture(params=["copy-on-write", "merge-on-read"])
def appender(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Appender]:
    catalog = RocksCatalog("t", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})
    catalog.create_namespace(("ns",))
    catalog.create_table(("ns", "t"), schema=SCHEMA, properties={"write.delete.mode": request.param,
                                                                 "format-version": "2"})
    try:
        yield Appender(catalog)
    finally:
        catalog.close()


def rows(appender: Appender) -> list[tuple[int, str]]:
    table = appender.catalog.load_table(("ns", "t")).scan().to_arrow()
    return sorted(zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True))


def run(appender: Appender, transactions: list[list[Change]], max_rows: int = 1000) -> IngestRunner:
    runner = IngestRunner("cdc", Scripted({"transactions": transactions}), CatalogSink(appender, "ns.t"), max_rows)
    runner.run_once()
    return runner


def test_inserts_updates_and_deletes_by_key(appender: Appender) -> None:
    script: list[list[Change]] = [
        [("insert", i, f"a{i}") for i in range(1, 7)],
        [("update", 2, "b2"), ("delete", 3, None), ("insert", 7, "a7")],
        [("update", 7, "b7"), ("update", 7, "c7"), ("delete", 1, None), ("insert", 1, "again")],
    ]
    run(appender, script, max_rows=1)  # one transaction per commit
    assert rows(appender) == [(1, "again"), (2, "b2"), (4, "a4"), (5, "a5"), (6, "a6"), (7, "c7")]
    table = appender.catalog.load_table(("ns", "t"))
    mode = table.metadata.properties["write.delete.mode"]
    snapshots = table.metadata.snapshots
    assert len(snapshots) == 3  # one commit per source transaction
    summary = snapshots[-1].summary.additional_properties
    assert summary["icefloe.ingest.cdc.step"] == "3" and summary["icefloe.ingest.cdc.checkpoint"] == '{"":"3"}'
    if mode == "merge-on-read":
        assert int(summary.get("added-position-deletes", "0")) > 0
    else:
        assert "added-position-deletes" not in summary


def test_changes_of_many_transactions_in_one_commit_fold_per_key(appender: Appender) -> None:
    script: list[list[Change]] = [[("insert", 1, "a")], [("update", 1, "b")], [("delete", 1, None)],
                                  [("insert", 2, "x")], [("delete", 2, None), ("insert", 2, "y")]]
    runner = run(appender, script)
    assert runner.status().commits == 1
    assert rows(appender) == [(2, "y")]
    # Applying the same changes again (an overlap with a snapshot) converges to the same rows.
    again = IngestRunner("cdc2", Scripted({"transactions": script}), CatalogSink(appender, "ns.t"))
    again.run_once()
    assert rows(appender) == [(2, "y")]


def test_a_refused_change_commits_nothing(appender: Appender) -> None:
    run(appender, [[("insert", 1, "a")]])

    class Wider(Scripted):
        def read(self, max_rows: int) -> Iterator[Envelope]:
            for envelope in super().read(max_rows):
                extra = pa.array(["x"] * envelope.rows.num_rows)
                yield Envelope(envelope.rows.append_column("extra", extra), envelope.partition, envelope.position,
                               envelope.op, envelope.key, envelope.transaction, envelope.transaction_end)

    runner = IngestRunner("cdc", Wider({"transactions": [[("insert", 1, "a")], [("update", 1, "z")]]}),
                          CatalogSink(appender, "ns.t"))
    with pytest.raises(SchemaMismatchError, match="extra"):
        runner.run_once()
    assert rows(appender) == [(1, "a")]
    assert runner.status().state.value == "failed"


@pytest.mark.parametrize("action", ["block", "quarantine"])
def test_changes_pass_the_tables_quality_gate(appender: Appender, action: str) -> None:
    """A change's new rows meet the table's expectations like any other write's; a failing
    change commits nothing (quarantine acts as block: the change's delete of the old version
    and its new version are one decision) and the connector's checkpoint stays where it was."""
    from catalog.expectations import QualityBlocked
    from flight_server.engine.quality import DuckDBQualityGate

    appender.quality_gate = DuckDBQualityGate()
    run(appender, [[("insert", 1, "a"), ("insert", 2, "b")]])
    with appender.catalog.load_table(("ns", "t")).transaction() as tx:
        tx.set_properties({"icefloe.expect.named": "name IS NOT NULL AND name <> 'bad'",
                           "icefloe.expect.named.on-failure": action})
    before = appender.catalog.load_table(("ns", "t")).metadata.current_snapshot_id
    runner = IngestRunner("cdc", Scripted({"transactions": [[("insert", 1, "a"), ("insert", 2, "b")],
                                                            [("update", 1, "bad"), ("insert", 3, "c")]]}),
                          CatalogSink(appender, "ns.t"))
    with pytest.raises(QualityBlocked, match="named"):  # resumes after the first transaction
        runner.run_once()
    assert rows(appender) == [(1, "a"), (2, "b")]
    assert runner.status().state.value == "failed"
    after = appender.catalog.load_table(("ns", "t"))
    assert after.metadata.current_snapshot_id == before  # no commit: the checkpoint did not move
    assert after.metadata.snapshots[-1].summary.additional_properties["icefloe.ingest.cdc.checkpoint"] == '{"":"1"}'


def test_a_change_reads_only_the_files_whose_key_range_may_hold_its_keys(appender: Appender) -> None:
    """Key-range pruning: a commit of changes opens only the data files whose key bounds (the
    manifest's column metrics) hold a touched key. Shown by removing, from disk, a file whose
    range holds none: the change still commits (it was never opened) and lands where it must."""
    import os

    script: list[list[Change]] = [[("insert", i, f"a{i}") for i in range(start, start + 10)]
                                  for start in (0, 100, 200)]
    run(appender, script, max_rows=1)  # one commit, so one data file, per transaction
    table = appender.catalog.load_table(("ns", "t"))
    files = {int(f.file.lower_bounds[1][0]): f.file.file_path for f in table.scan().plan_files()}
    assert sorted(files) == [0, 100, 200]
    os.remove(files[200].removeprefix("file://"))  # ids 200..209: no change below touches them
    # Keys 5 and 150 (no file holds 150: an insert), then 105 deleted.
    run(appender, [*script, [("update", 5, "b5"), ("insert", 150, "new")], [("delete", 105, None)]])
    table = appender.catalog.load_table(("ns", "t"))
    assert table.metadata.snapshots[-1].summary.additional_properties["icefloe.ingest.cdc.step"] == "4"
    kept = {f.file.file_path for f in table.scan().plan_files()}
    assert files[200] in kept  # untouched: neither rewritten nor given delete files
    readable = [pa.table({"id": [0]})]  # the other files are read back whole
    for path in sorted(kept - {files[200]}):
        readable.append(pa.parquet.read_table(path.removeprefix("file://"), columns=["id"]))
    ids = sorted(pa.concat_tables(readable).column("id").to_pylist()[1:])
    if table.metadata.properties["write.delete.mode"] == "copy-on-write":
        assert ids == sorted([*range(0, 10), *range(100, 105), *range(106, 110), 150])
    else:  # merge-on-read: the deletes are in delete files, the data files stay as written
        assert set(ids) >= {5, 105, 150}


class TwoTables(Scripted):
    """Source transactions over two tables: each change is (table, op, id, name)."""

    def read(self, max_rows: int) -> Iterator[Envelope]:
        while self.at < len(self.transactions):
            changes = self.transactions[self.at]
            self.at += 1
            for n, (table, op, key, name) in enumerate(changes):  # type: ignore[misc]
                rows = pa.table({"id": pa.array([key], pa.int64()), "name": pa.array([name], pa.string())})
                last = n == len(changes) - 1
                yield Envelope(rows, "", str(self.at) if last else f"{self.at}.{n}", op=Op(op), key=("id",),
                               transaction=str(self.at), transaction_end=last, table=table)


def test_a_source_transaction_over_two_tables_is_one_catalog_commit(appender: Appender) -> None:
    """Envelopes naming their target table: every table a commit touches lands in ONE catalog
    batch (consecutive seqs, the checkpoint in each); a change one table's quality gate refuses
    lands in neither, and the checkpoint stays."""
    from catalog.expectations import QualityBlocked
    from flight_server.engine.quality import DuckDBQualityGate

    catalog = appender.catalog
    mode = catalog.load_table(("ns", "t")).metadata.properties["write.delete.mode"]
    catalog.create_table(("ns", "u"), schema=SCHEMA, properties={"write.delete.mode": mode, "format-version": "2"})
    script = [[("ns.t", "insert", 1, "a"), ("ns.u", "insert", 1, "a")],
              [("ns.t", "update", 1, "b"), ("ns.u", "delete", 1, None), ("ns.u", "insert", 2, "c")],
              [("ns.u", "update", 2, "d")]]
    sink = CatalogSink(appender, "ns.t", tables=("ns.t", "ns.u"))
    runner = IngestRunner("two", TwoTables({"transactions": script}), sink, max_rows=1)
    head = catalog.log.head()
    runner.run_once()
    assert rows(appender) == [(1, "b")]
    u = catalog.load_table(("ns", "u")).scan().to_arrow()
    assert list(zip(u.column("id").to_pylist(), u.column("name").to_pylist(), strict=True)) == [(2, "d")]
    records = list(catalog.log.read(head))
    assert [(r.table, r.extra["ingest"]["step"]) for r in records] == [("t", 1), ("u", 1), ("t", 2), ("u", 2),
                                                                       ("u", 3)]
    assert sink.checkpoint("two").step == 3 and sink.checkpoint("two").positions == {"": "3"}
    # One table's gate refuses the new row: neither table changes, the checkpoint stays.
    appender.quality_gate = DuckDBQualityGate()
    with catalog.load_table(("ns", "u")).transaction() as tx:
        tx.set_properties({"icefloe.expect.named": "name <> 'bad'"})
    head = catalog.log.head()
    more = IngestRunner("two", TwoTables({"transactions": [*script, [("ns.t", "insert", 5, "ok"),
                                                                      ("ns.u", "insert", 5, "bad")]]}), sink)
    with pytest.raises(QualityBlocked, match="named"):
        more.run_once()
    assert catalog.log.head() == head and rows(appender) == [(1, "b")]
    assert sink.checkpoint("two").step == 3
