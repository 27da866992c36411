"""A change scan over appends whose snapshots expired reads the table's manifests once.

Each expired append used to re-index the current snapshot's live files on its own: a range of
1,000 small appends read every manifest 1,000 times (a batched ``icefloe.pipe`` over them
ran at 30 rows/s, bench_embedded). The rows must come out the same.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.manifest import ManifestFile

import icefloe

COMMITS = 30


def test_a_range_of_expired_appends_reads_each_manifest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = icefloe.open(tmp_path / "warehouse")
    lake.create_namespace("ns")
    t = lake.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    lake.backend.catalog.load_table(("ns", "t")).transaction().set_properties(  # type: ignore[attr-defined]
        {"icefloe.snapshots.retain": "3", "write.metadata.previous-versions-max": "1",
         "write.metadata.delete-after-commit.enabled": "true"}).commit_transaction()
    first = lake.head()
    for c in range(COMMITS):
        t.append(pa.table({"id": pa.array([c * 10 + i for i in range(10)], pa.int64())}))
    current = lake.backend.catalog.load_table(("ns", "t"))  # type: ignore[attr-defined]
    assert len(current.metadata.snapshots) == 3  # so most of the range's snapshots are gone
    manifests = len(current.current_snapshot().manifests(current.io))

    reads = []
    original = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, *args: object, **kwargs: object) -> object:
        reads.append(self.manifest_path)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    batches = list(t.changes(after=first, until=lake.head()))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [r["id"] for r in rows] == list(range(COMMITS * 10))
    assert [r["_seq"] for r in rows] == [first + 1 + i // 10 for i in range(COMMITS * 10)]
    assert len(reads) <= 2 * manifests, f"{len(reads)} manifest reads for {manifests} manifests"
    lake.close()
