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
