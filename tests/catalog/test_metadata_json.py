"""The commit path's own serialisers write exactly what pyiceberg would.

``catalog.metadata_json`` splices kept snapshot texts into the metadata JSON and
``catalog.avro_cache`` shares Avro writers and header schemas: both must give pyiceberg's bytes
(metadata) and pyiceberg-readable files with the same records (manifests), over tables with
many snapshots, schema evolution, partitioning, properties and refs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.metadata_json import metadata_json

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


def test_metadata_json_is_pyiceberg_s_bytes_over_many_commits(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.t", ROWS.schema, properties={"owner": 'quote " and "snapshots":[] inside'})
        appender = Appender(cat)
        for i in range(30):
            appender.append_table(("ns", "t"), ROWS)
            if i == 10:
                with cat.load_table("ns.t").update_schema() as update:
                    update.add_column("extra", StringType(), doc="added midway")
            if i == 20:
                cat.load_table("ns.t").manage_snapshots().create_tag(
                    cat.load_table("ns.t").current_snapshot().snapshot_id, "v20"  # type: ignore[union-attr]
                ).commit()
        table = cat.load_table("ns.t")
        assert len(table.metadata.snapshots) == 30
        assert metadata_json(table.metadata) == table.metadata.model_dump_json()
        twice = metadata_json(table.metadata)  # from the kept texts this time
        assert twice == table.metadata.model_dump_json()
        # What is on disk is that text, and pyiceberg reads it back to the same metadata.
        on_disk = Path(table.metadata_location.removeprefix("file://")).read_text()
        assert json.loads(on_disk) == json.loads(table.metadata.model_dump_json())
    finally:
        cat.close()


def test_no_snapshots_and_an_empty_table(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.empty", ROWS.schema)
        assert metadata_json(table.metadata) == table.metadata.model_dump_json()
    finally:
        cat.close()


def test_manifests_written_with_shared_writers_read_back_in_another_catalog(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType()))
        spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="b"))
        cat.create_table("ns.parted", schema, partition_spec=spec)
        cat.create_table("ns.plain", schema)
        appender = Appender(cat)
        for _ in range(3):  # both shapes of manifest interleaved: each writer must be its own
            appender.append_table(("ns", "parted"), ROWS)
            appender.append_table(("ns", "plain"), ROWS)
        other = SqlCatalog("other", uri=f"sqlite:///{tmp_path}/o.db", warehouse=f"file://{tmp_path}/o")
        other.create_namespace("ns")
        for name in ("parted", "plain"):
            mine = cat.load_table(f"ns.{name}")
            theirs = other.register_table(("ns", name), mine.metadata_location)
            assert sorted(theirs.scan().to_arrow().column("id").to_pylist()) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
            snapshot = theirs.current_snapshot()
            assert snapshot is not None
            for manifest in snapshot.manifests(theirs.io):
                for entry in manifest.fetch_manifest_entry(theirs.io):
                    assert entry.data_file.record_count > 0
                    assert entry.data_file.partition is not None
                    if name == "parted":
                        assert len(entry.data_file.partition) == 1
    finally:
        cat.close()
