"""Manifest lists written from cached entry bytes are byte for byte what pyiceberg writes, and
an append no longer encodes the entries it carries over from the previous list."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.manifest import ManifestListWriterV2, read_manifest_list

from catalog import RocksCatalog, manifest_list_cache


def _partitioned_table(tmp_path: Path, appends: int) -> tuple[Any, Any]:
    cat = RocksCatalog("mlc", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    schema = pa.schema([pa.field("day", pa.int32()), pa.field("v", pa.string())])
    table = cat.create_table("ns.t", schema)
    with table.transaction() as tx, tx.update_spec() as update:
        update.add_identity("day")
    assert [f.name for f in cat.load_table("ns.t").spec().fields] == ["day"]
    for i in range(appends):  # partition summaries (bounds, nulls) differ per manifest
        days = pa.array([i, i + 1, None if i % 2 else i], pa.int32())
        cat.load_table("ns.t").append(pa.table({"day": days, "v": ["a", None, "c"]}))
    return cat, cat.load_table("ns.t")


def _write(path: Path, manifests: list[Any], block: bool) -> bytes:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    writer = ManifestListWriterV2(PyArrowFileIO().new_output(str(path)), 7, 6, 42, "gzip")
    with writer:
        if block:  # pyiceberg's own encoding of every entry
            writer._writer.write_block([writer.prepare_manifest(m) for m in manifests])
        else:
            writer.add_manifests(manifests)
    return path.read_bytes()


def test_the_cached_list_is_byte_for_byte_pyicebergs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cat, table = _partitioned_table(tmp_path, 6)
    try:
        manifests = table.current_snapshot().manifests(table.io)
        assert len(manifests) == 6 and any(m.partitions for m in manifests)
        monkeypatch.setattr(os, "urandom", lambda n: b"\x5a" * n)  # the same sync marker in both files
        ours = _write(tmp_path / "ours.avro", manifests, block=False)
        again = _write(tmp_path / "again.avro", manifests, block=False)  # from the cache this time
        reference = _write(tmp_path / "reference.avro", manifests, block=True)
        assert ours == reference and again == reference
        from pyiceberg.io.pyarrow import PyArrowFileIO

        read = list(read_manifest_list(PyArrowFileIO().new_input(str(tmp_path / "again.avro"))))
        assert [m.manifest_path for m in read] == [m.manifest_path for m in manifests]
    finally:
        cat.close()


def test_an_append_encodes_only_its_new_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cat, table = _partitioned_table(tmp_path, 5)
    try:
        encoded: list[Any] = []
        original = manifest_list_cache.EntryBytes.encoded

        def counting(self: Any, writer: Any, version: int, entry: Any, encoder: Any) -> bytes:
            before = len(self._bytes)
            data = original(self, writer, version, entry, encoder)
            if len(self._bytes) > before:
                encoded.append(entry.manifest_path)
            return data

        monkeypatch.setattr(manifest_list_cache.EntryBytes, "encoded", counting)
        table.append(pa.table({"day": pa.array([9], pa.int32()), "v": ["z"]}))
        table = cat.load_table("ns.t")
        manifests = table.current_snapshot().manifests(table.io)
        assert len(manifests) == 6
        assert encoded == [manifests[0].manifest_path]  # pyiceberg puts the new manifest first
        assert table.scan().to_arrow().num_rows == 16
    finally:
        cat.close()


def _file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of manifest lists read from storage from now on (pyiceberg's own reader)."""
    import pyiceberg.manifest as manifest

    reads: list[str] = []
    original = manifest.read_manifest_list

    def counting(input_file: Any) -> Any:
        reads.append(input_file.location)
        return original(input_file)

    monkeypatch.setattr(manifest, "read_manifest_list", counting)
    return reads


def _from_file(table: Any, snapshot: Any) -> list[Any]:
    return list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_an_append_reads_no_manifest_list_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  format_version: str) -> None:
    """The server's append path (Appender: durable files, group commit) takes the previous list's
    manifests from what it wrote (v2); each snapshot's manifests equal its file's, field by field."""
    from catalog.append import Appender

    cat = RocksCatalog("mlc", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
        cat.create_table("ns.t", schema, properties={"format-version": format_version})
        appender = Appender(cat)
        rows = pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", None]})
        appender.append_table(("ns", "t"), rows)
        reads = _file_reads(monkeypatch)
        for _ in range(4):
            appender.append_table(("ns", "t"), rows)
        table = cat.load_table(("ns", "t"))
        assert table.metadata.format_version == int(format_version)
        current = table.current_snapshot()
        listed = current.manifests(table.io)
        if format_version == "1":  # a v1 list is read back: its reads fill fields it lacks
            assert len(reads) >= 4
        else:
            assert reads == []
            assert manifest_list_cache.WRITTEN.get(current.manifest_list) is not None
        monkeypatch.undo()
        for snapshot in table.snapshots():
            assert snapshot.manifests(table.io) == _from_file(table, snapshot)
        assert len(listed) == 5 and listed == _from_file(table, current)
        assert [m.sequence_number for m in listed] == [m.sequence_number for m in _from_file(table, current)]
        assert table.scan().to_arrow().num_rows == 10
    finally:
        cat.close()


def test_a_list_written_but_not_committed_changes_no_read(tmp_path: Path) -> None:
    """A list whose writer failed is not kept: a later list at that path (none is ever reused,
    but a reader must never get what a failed write meant to say) is read from storage."""
    cat, table = _partitioned_table(tmp_path, 2)
    try:
        manifests = table.current_snapshot().manifests(table.io)
        from pyiceberg.io.pyarrow import PyArrowFileIO

        path = str(tmp_path / "failed.avro")
        writer = ManifestListWriterV2(PyArrowFileIO().new_output(path), 7, 6, 42, "gzip")
        with pytest.raises(RuntimeError), writer:
            writer.add_manifests(manifests)
            raise RuntimeError("the commit broke off")
        assert manifest_list_cache.WRITTEN.get(path) is None
        ok = str(tmp_path / "ok.avro")
        with ManifestListWriterV2(PyArrowFileIO().new_output(ok), 7, 6, 42, "gzip") as good:
            good.add_manifests(manifests)
        assert manifest_list_cache.WRITTEN.get(ok) == tuple(read_manifest_list(PyArrowFileIO().new_input(ok)))
    finally:
        cat.close()


def test_carried_entries_are_looked_up_by_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append's list carries the last list's entries as the same objects, and only its new
    entry is keyed by its fields; the list still reads back as what was written."""
    from catalog.append import Appender

    cat = RocksCatalog("mlc", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        rows = pa.table({"id": pa.array([1, 2], pa.int64())})
        cat.create_table("ns.t", rows.schema)
        appender = Appender(cat)
        for _ in range(4):
            appender.append_table(("ns", "t"), rows)
        before = cat.load_table(("ns", "t")).current_snapshot().manifests(cat.load_table(("ns", "t")).io)
        keyed: list[Any] = []
        original = manifest_list_cache._fields
        monkeypatch.setattr(manifest_list_cache, "_fields", lambda entry: keyed.append(entry) or original(entry))
        appender.append_table(("ns", "t"), rows)
        table = cat.load_table(("ns", "t"))
        after = table.current_snapshot().manifests(table.io)
        assert len(after) == 5 and len(keyed) == 1 and keyed[0].manifest_path == after[0].manifest_path
        assert all(a is b for a, b in zip(after[1:], before, strict=True))  # pyiceberg puts the new one first
        monkeypatch.undo()
        assert after == list(read_manifest_list(table.io.new_input(table.current_snapshot().manifest_list)))
        assert table.scan().to_arrow().num_rows == 10
    finally:
        cat.close()


def _blocks_and_sync(table: Any, snapshot: Any) -> tuple[int, bytes]:
    """The number of Avro blocks of a snapshot's manifest list and its sync marker (each block
    ends with the marker, which the header carries once)."""
    with table.io.new_input(snapshot.manifest_list).open() as stream:
        data = stream.read()
    sync = data[-16:]
    return data.count(sync) - 1, sync


def _appended_v2(tmp_path: Path, appends: int) -> tuple[Any, Any]:
    from catalog.append import Appender

    cat = RocksCatalog("mlc", warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", None]})
    cat.create_table("ns.t", rows.schema, properties={"format-version": "2"})
    appender = Appender(cat)
    for _ in range(appends):
        appender.append_table(("ns", "t"), rows)
    return cat, cat.load_table(("ns", "t"))


def test_an_append_compresses_only_its_new_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast append's list is its predecessor's compressed blocks behind one new block (the same
    sync marker), and reads back, from storage, as every manifest in order."""
    cat, table = _appended_v2(tmp_path, 5)
    try:
        compressed: list[int] = []
        from pyiceberg.avro.codecs.deflate import DeflateCodec

        original = DeflateCodec.compress
        monkeypatch.setattr(DeflateCodec, "compress",
                            staticmethod(lambda data: compressed.append(len(data)) or original(data)))
        from catalog.append import Appender

        Appender(cat).append_table(("ns", "t"), pa.table({"id": pa.array([3], pa.int64()), "s": ["c"]}))
        monkeypatch.undo()
        table = cat.load_table(("ns", "t"))
        snapshots = table.snapshots()
        assert [_blocks_and_sync(table, s)[0] for s in snapshots] == [1, 2, 3, 4, 5, 6]
        assert len({_blocks_and_sync(table, s)[1] for s in snapshots}) == 1
        # The list's one compression was of its new entry (and the manifest's of its one file).
        assert len(compressed) == 2 and max(compressed) < 2_000
        for snapshot in snapshots:
            assert snapshot.manifests(table.io) == _from_file(table, snapshot)
        listed = _from_file(table, table.current_snapshot())
        assert len(listed) == 6 and [m.sequence_number for m in listed] == [6, 5, 4, 3, 2, 1]
        assert table.scan().to_arrow().num_rows == 11
    finally:
        cat.close()


def test_a_list_is_one_block_again_after_max_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_list_cache, "MAX_BLOCKS", 3)
    cat, table = _appended_v2(tmp_path, 7)
    try:
        snapshots = table.snapshots()
        assert [_blocks_and_sync(table, s)[0] for s in snapshots] == [1, 2, 3, 1, 2, 3, 1]
        for snapshot in snapshots:
            assert snapshot.manifests(table.io) == _from_file(table, snapshot)
        assert table.scan().to_arrow().num_rows == 14
    finally:
        cat.close()


def test_a_list_that_drops_entries_is_written_whole(tmp_path: Path) -> None:
    """After a commit that drops manifests (an overwrite), the next append's list does not carry
    the old blocks: it is one block, and reads back as its manifests."""
    from catalog.append import Appender

    cat, table = _appended_v2(tmp_path, 3)
    try:
        table.overwrite(pa.table({"id": pa.array([7], pa.int64()), "s": ["o"]}))
        Appender(cat).append_table(("ns", "t"), pa.table({"id": pa.array([8], pa.int64()), "s": ["p"]}))
        table = cat.load_table(("ns", "t"))
        current = table.current_snapshot()
        assert _blocks_and_sync(table, current)[0] <= 2
        assert current.manifests(table.io) == _from_file(table, current)
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [7, 8]
    finally:
        cat.close()
