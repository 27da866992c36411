"""The shared Avro set-up for manifest reads: same answers, built once per schema."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyiceberg.avro.file as avro_file

from catalog import RocksCatalog
from catalog.maintenance import compact

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


def test_manifests_read_the_same_and_share_schema_and_reader(tmp_path: Path) -> None:
    cat = RocksCatalog("avro", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", ROWS.schema)
        for _ in range(3):
            table.append(ROWS)
        table = cat.load_table("ns.t")
        snapshot = table.current_snapshot()
        assert snapshot is not None
        manifests = snapshot.manifests(table.io)
        assert len(manifests) == 3  # one per append
        opened = []
        for manifest in manifests:
            reader: avro_file.AvroFile = avro_file.AvroFile(table.io.new_input(manifest.manifest_path))
            with reader as f:
                opened.append((f.schema, f.reader, sum(1 for _ in f)))
        # Built once, shared by every manifest with the same schema.
        assert all(schema is opened[0][0] for schema, _, _ in opened)
        assert all(r is opened[0][1] for _, r, _ in opened)
        assert [n for _, _, n in opened] == [1, 1, 1]
        # And the data reads back exactly (entries decode into fresh objects each time).
        files = [e.data_file.file_path for m in manifests for e in m.fetch_manifest_entry(table.io)]
        assert len(set(files)) == 3
        assert table.scan().to_arrow().num_rows == 9
    finally:
        cat.close()


def test_compaction_with_shared_readers_keeps_every_row(tmp_path: Path) -> None:
    from catalog.append import Appender

    cat = RocksCatalog("avro", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.t", ROWS.schema)
        for _ in range(4):
            cat.load_table("ns.t").append(ROWS)
        report = compact(Appender(cat), ("ns", "t"), min_input_files=2)
        assert report.compacted_files == 4
        got = cat.load_table("ns.t").scan().to_arrow()
        assert got.num_rows == 12 and sorted(got.column("id").to_pylist()) == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    finally:
        cat.close()
