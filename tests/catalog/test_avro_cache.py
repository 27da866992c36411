"""The shared Avro set-up for manifest reads: same answers, built once per schema."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyiceberg.avro.file as avro_file
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from catalog import RocksCatalog
from catalog.maintenance import compact

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


@contextmanager
def _three_appends(tmp_path: Path) -> Iterator[tuple[Table, list[ManifestFile]]]:
    """A table after three appends of ROWS, and its current snapshot's manifests."""
    cat = RocksCatalog("avro", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", ROWS.schema)
        for _ in range(3):
            table.append(ROWS)
        table = cat.load_table("ns.t")
        snapshot = table.current_snapshot()
        assert snapshot is not None
        yield table, snapshot.manifests(table.io)
    finally:
        cat.close()


def test_manifests_read_the_same_and_share_schema_and_reader(tmp_path: Path) -> None:
    with _three_appends(tmp_path) as (table, manifests):
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


def test_manifest_writers_share_their_entry_schemas_and_stay_exact(tmp_path: Path) -> None:
    """Every manifest writer of one (format version, partition type) gets the same schema
    objects; manifests of partitioned and unpartitioned tables still read back exactly."""
    from pyiceberg.manifest import ManifestWriter

    cat = RocksCatalog("avro", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.plain", ROWS.schema)
        parted = cat.create_table("ns.parted", ROWS.schema)
        with parted.transaction() as tx, tx.update_spec() as update:
            update.add_identity("name")
        built: list[tuple[str, int, object]] = []
        original = ManifestWriter._with_partition

        def recording(self: ManifestWriter, format_version: int) -> object:
            schema = original(self, format_version)
            built.append((self._spec.spec_id, format_version, schema))
            return schema

        ManifestWriter._with_partition = recording  # type: ignore[method-assign]
        try:
            for _ in range(2):
                cat.load_table("ns.plain").append(ROWS)
                cat.load_table("ns.parted").append(ROWS)
        finally:
            ManifestWriter._with_partition = original  # type: ignore[method-assign]
        by_key: dict[tuple[int, int], set[int]] = {}
        for spec_id, version, schema in built:
            by_key.setdefault((spec_id, version), set()).add(id(schema))
        assert set(by_key) >= {(0, 2), (1, 2)}
        assert all(len(ids) == 1 for ids in by_key.values()), by_key  # one object per key
        unpartitioned = next(s for k, _, s in built if k == 0)
        partitioned = next(s for k, _, s in built if k == 1)
        assert unpartitioned is not partitioned and "name" in str(partitioned)
        for name, parts in (("ns.plain", [None]), ("ns.parted", ["a", "b", "c"])):
            table = cat.load_table(name)
            manifests = table.current_snapshot().manifests(table.io)
            entries = [e for m in manifests for e in m.fetch_manifest_entry(table.io)]
            assert len(entries) == 2 * (1 if parts == [None] else 3)
            values = sorted({e.data_file.partition[0] if len(e.data_file.partition) else None for e in entries},
                            key=str)
            assert values == sorted(parts, key=str)
            assert table.scan().to_arrow().num_rows == 6
    finally:
        cat.close()


def test_a_durable_file_knows_its_length_without_a_stat(tmp_path: Path) -> None:
    """pyiceberg asks for a written manifest's length at once; the durable file answers from
    the bytes it wrote, exactly the size on disk, and stats only when it wrote nothing."""
    import os

    import pytest
    from pyiceberg.io.pyarrow import PyArrowFile

    from catalog.durable_io import DurableFileIO

    io = DurableFileIO()
    path = str(tmp_path / "m.avro")
    output = io.new_output(path)
    with output.create() as stream:
        for chunk in (b"abc", b"", b"x" * 100_000, memoryview(b"tail")):
            stream.write(chunk)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PyArrowFile, "_file_info", lambda self: (_ for _ in ()).throw(AssertionError("stat")))
        assert len(output) == os.path.getsize(path) == 3 + 100_000 + 4
    again = io.new_output(str(tmp_path / "other.avro"))
    with again.create():
        pass
    assert len(again) == 0
    fresh = io.new_output(path)  # a new object over an existing file: stat, as pyiceberg does
    assert len(fresh) == os.path.getsize(path)


def _reference_write_int(integer: int) -> bytes:
    # pyiceberg's zig-zag varint, byte by byte, as its BinaryEncoder.write_int writes it.
    out = b""
    datum = (integer << 1) ^ (integer >> 63)
    while (datum & ~0x7F) != 0:
        out += bytes([(datum & 0x7F) | 0x80])
        datum >>= 7
    return out + bytes([datum])


def test_varints_are_encoded_as_pyiceberg_encodes_them(tmp_path: Path) -> None:
    import io

    from pyiceberg.avro.decoder_fast import CythonBinaryDecoder
    from pyiceberg.avro.encoder import BinaryEncoder

    RocksCatalog("avro", warehouse=str(tmp_path / "wh")).close()  # installs the caches
    values = [0, 1, -1, 63, -64, 64, -65, 127, 128, 8191, 8192, -8193, 2**31 - 1, -(2**31), 2**53, 2**63 - 1, -(2**63)]
    for value in values:
        buffer = io.BytesIO()
        BinaryEncoder(buffer).write_int(value)
        assert buffer.getvalue() == _reference_write_int(value), value
        assert CythonBinaryDecoder(buffer.getvalue()).read_int() == value


def test_a_cached_header_differs_only_in_its_sync_marker(tmp_path: Path) -> None:
    # Manifests of one table share their encoded header; each file keeps its own sync marker
    # (its blocks end with it), and every manifest still opens with the right schema.
    with _three_appends(tmp_path) as (table, manifests):
        headers = []
        for manifest in manifests:
            with avro_file.AvroFile(table.io.new_input(manifest.manifest_path)) as f:
                headers.append(f.header)
                assert sum(1 for _ in f) == 1
        assert len({h.sync for h in headers}) == 3
        assert all(h.meta == headers[0].meta for h in headers)
        assert headers[0].get_schema() is not None
