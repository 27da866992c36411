"""Write a manifest list by reusing the Avro bytes of the entries it shares with the last one.

An Iceberg fast append writes a new manifest list: the new manifest's entry plus every entry
of the previous list, unchanged. pyiceberg encodes each entry again in Python on every commit,
so with a manifest per append (until maintenance merges them) an append's cost grew with the
table's history: 18% of a small append's time at ~350 manifests (py-spy over 300 DoPuts), in
``ManifestListWriter.add_manifests``. An entry's bytes depend only on the list's format version
and the entry's fields, and a manifest's entry never changes once its sequence numbers are
assigned, so its encoding is cached here and a list is written as the cached bytes joined,
compressed and framed exactly as pyiceberg's ``AvroOutputFile.write_block`` does.

``install`` replaces ``ManifestListWriter.add_manifests`` (idempotent); it leaves pyiceberg
alone if the internals it relies on have moved.
"""

from __future__ import annotations

import functools
import io
import logging
from typing import Any

from catalog.lru import LockedLRU

logger = logging.getLogger("icefloe.catalog.manifest_list_cache")

CACHE_ENTRIES = 200_000  # ~100-200 bytes each


class EntryBytes:
    """An LRU of encoded manifest-list entries keyed by (format version, every scalar field)."""

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        self._bytes: LockedLRU[tuple[Any, ...], bytes] = LockedLRU(size)

    def encoded(self, writer: Any, format_version: int, entry: Any, encoder_class: Any) -> bytes:
        key = (format_version, *_fields(entry))
        found = self._bytes.get(key)
        if found is not None:
            return found
        buffer = io.BytesIO()
        writer.write(encoder_class(output_stream=buffer), entry)
        data = buffer.getvalue()
        self._bytes.put(key, data)
        return data


def _fields(entry: Any) -> tuple[Any, ...]:
    """The key of a ``ManifestFile`` entry: every scalar field. Its partition summaries are left
    out: they are a function of the manifest's contents, which its path and length fix."""
    return tuple(v for v in entry._data if not isinstance(v, list))


@functools.cache  # once per process
def install() -> None:
    try:
        from pyiceberg.avro.encoder import BinaryEncoder
        from pyiceberg.manifest import ManifestFile, ManifestListWriter

        assert "_data" in ManifestFile.__slots__ and callable(ManifestListWriter.prepare_manifest)
    except (ImportError, AttributeError, AssertionError):
        logger.warning("pyiceberg's manifest list writer has moved; entries are encoded every time")
        return
    cache = EntryBytes()

    def add_manifests(self: Any, manifest_files: list[Any]) -> Any:
        avro = self._writer  # pyiceberg's AvroOutputFile, header written
        entries = [self.prepare_manifest(m) for m in manifest_files]
        content = b"".join(cache.encoded(avro.writer, self._format_version, e, BinaryEncoder) for e in entries)
        # pyiceberg's AvroOutputFile.write_block, with the block content given.
        avro.encoder.write_int(len(entries))
        codec = avro.compression_codec()
        if codec:
            compressed, length = codec.compress(content)
            avro.encoder.write_int(length)
            avro.encoder.write(compressed)
        else:
            avro.encoder.write_int(len(content))
            avro.encoder.write(content)
        avro.encoder.write(avro.sync_bytes)
        return self

    setattr(ManifestListWriter, "add_manifests", add_manifests)  # noqa: B010 - on purpose, see above
