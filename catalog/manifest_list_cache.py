"""Write a manifest list by reusing the Avro bytes of the entries it shares with the last one.

An Iceberg fast append writes a new manifest list: the new manifest's entry plus every entry
of the previous list, unchanged. pyiceberg encodes each entry again in Python on every commit,
so with a manifest per append (until maintenance merges them) an append's cost grew with the
table's history: 18% of a small append's time at ~350 manifests (py-spy over 300 DoPuts), in
``ManifestListWriter.add_manifests``. An entry's bytes depend only on the list's format version
and the entry's fields, and a manifest's entry never changes once its sequence numbers are
assigned, so its encoding is cached here and a list is written as the cached bytes joined,
compressed and framed exactly as pyiceberg's ``AvroOutputFile.write_block`` does.

The next append then reads that list back: pyiceberg (0.12) re-reads and decodes a manifest
list on every ``Snapshot.manifests`` call, and no list had been read before its successor's
commit, so every append decoded its predecessor's whole list (~1 ms of a ~13 ms small append at
a few dozen manifests, and growing with them: py-spy over 300 sequential DoPuts). Manifest
lists are immutable and their paths unique, so the entries a v2+ list was written with are
kept by path (``WRITTEN``) and ``Snapshot.manifests`` answers from them. A v1 list is
left out: its schema lacks fields (content, sequence numbers) that a read fills with defaults,
so what was written is not what a read returns.

Even from cached entries, joining and compressing the whole list is work that grows with the
list: at ~160 manifests (a table between two compactions under a steady stream of appends) it
was ~3 of a ~20 ms server-side append (cProfile of 320 DoPuts). An Avro file is a sequence of
independently compressed blocks, each ended by the file's sync marker, so a list written into
memory (icefloe's fast append) that carries its predecessor's entries unchanged and in order is
written as the predecessor's header with its sync marker, a block of the new entries, then the
predecessor's compressed blocks as they are (``BLOCKS``). After ``MAX_BLOCKS`` blocks the list
is written as one block again, so readers never see more than that many.

``install`` replaces ``ManifestListWriter.add_manifests`` and ``__exit__`` and the
``_manifests`` that ``Snapshot.manifests`` calls (idempotent); it leaves pyiceberg alone if
the internals it relies on have moved.
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass
from typing import Any

from catalog.lru import LockedLRU

logger = logging.getLogger("icefloe.catalog.manifest_list_cache")

CACHE_ENTRIES = 200_000  # ~100-200 bytes each
# Entry objects kept alive for the by-object lookup (~1-2 KB each with their partition
# summaries): enough for the lists of many tables, bounded well below the bytes cache.
OBJECT_ENTRIES = 16_384
WRITTEN_LISTS = 256  # manifest lists by path: a tuple of shared ManifestFile references each
MAX_BLOCKS = 32  # blocks of a list written from its predecessor's (then: one block again)
_MAX_NEW = 8  # new entries ahead of the carried ones that a list may add and still reuse blocks


class EntryBytes:
    """An LRU of encoded manifest-list entries keyed by (format version, every scalar field),
    in front of it one keyed by the entry object itself.

    Entries carried from list to list are the same objects every time (``WRITTEN`` hands
    the last list's entries to the next append, and an entry with its sequence numbers assigned
    goes into the next list as it is), so the identity lookup spares building and hashing a
    key of every field per entry per append. ManifestFile objects are never changed once in a
    list (pyiceberg copies before it assigns sequence numbers, and shares them between readers).
    """

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        self._bytes: LockedLRU[tuple[Any, ...], bytes] = LockedLRU(size)
        self._by_object: LockedLRU[tuple[int, int], tuple[Any, bytes]] = LockedLRU(min(size, OBJECT_ENTRIES))

    def encoded(self, writer: Any, format_version: int, entry: Any, encoder_class: Any) -> bytes:
        same = self._by_object.get((format_version, id(entry)))
        if same is not None and same[0] is entry:
            return same[1]
        key = (format_version, *_fields(entry))
        found = self._bytes.get(key)
        if found is None:
            buffer = io.BytesIO()
            writer.write(encoder_class(output_stream=buffer), entry)
            found = buffer.getvalue()
            self._bytes.put(key, found)
        self._by_object.put((format_version, id(entry)), (entry, found))  # keeps entry alive: no id reuse
        return found


# The manifests of recently written manifest lists (format v2+), by the list's path.
WRITTEN: LockedLRU[str, tuple[Any, ...]] = LockedLRU(WRITTEN_LISTS)


@dataclass(frozen=True)
class ListBlocks:
    """The Avro body of a written v2 manifest list: its entries (the objects written, in
    order), its sync marker and its framed blocks (count, length, compressed bytes, sync)."""

    entries: tuple[Any, ...]
    sync: bytes
    blocks: tuple[bytes, ...]


# Recently written lists' bodies, by (id of their first entry, entry count): a list carrying
# them finds them from its own entries. The record holds its entries, so the ids stay theirs.
BLOCKS: LockedLRU[tuple[int, int], ListBlocks] = LockedLRU(WRITTEN_LISTS)


def _predecessor(entries: list[Any]) -> tuple[int, ListBlocks] | None:
    """The written list whose entries are ``entries[k:]`` (the very objects), and ``k``; None
    when there is none, or the longest such list has ``MAX_BLOCKS`` blocks already (then the
    list is written as one block, rather than behind the shorter ones' blocks)."""
    for k in range(min(len(entries), _MAX_NEW + 1)):
        found = BLOCKS.get((id(entries[k]), len(entries) - k))
        if found is not None and all(a is b for a, b in zip(found.entries, entries[k:], strict=True)):
            return (k, found) if len(found.blocks) < MAX_BLOCKS else None
    return None


def _fields(entry: Any) -> tuple[Any, ...]:
    """The key of a ``ManifestFile`` entry: every scalar field. Its partition summaries are left
    out: they are a function of the manifest's contents, which its path and length fix."""
    return tuple(v for v in entry._data if not isinstance(v, list))


@functools.cache  # once per process
def install() -> None:
    try:
        import pyiceberg.table.snapshots as snapshots
        from pyiceberg.avro.encoder import BinaryEncoder
        from pyiceberg.manifest import UNASSIGNED_SEQ, ManifestFile, ManifestListWriter

        assert "_data" in ManifestFile.__slots__ and callable(ManifestListWriter.prepare_manifest)
        read_list = snapshots._manifests  # type: ignore[attr-defined]
        close_writer = ManifestListWriter.__exit__
    except (ImportError, AttributeError, AssertionError):
        logger.warning("pyiceberg's manifest list writer has moved; entries are encoded every time")
        return
    cache = EntryBytes()

    def carried(self: Any, manifest: Any) -> bool:
        # A v2 list's prepare_manifest only assigns unassigned sequence numbers; otherwise it
        # answers an equal copy, so a carried entry is written as the object it is.
        return bool(self._format_version == 2 and manifest.sequence_number != UNASSIGNED_SEQ
                    and manifest.min_sequence_number != UNASSIGNED_SEQ)

    def framed(avro: Any, format_version: int, entries: list[Any]) -> bytes:
        # pyiceberg's AvroOutputFile.write_block, with the entries' cached bytes.
        content = b"".join(cache.encoded(avro.writer, format_version, e, BinaryEncoder) for e in entries)
        out = io.BytesIO()
        encoder = BinaryEncoder(out)
        encoder.write_int(len(entries))
        codec = avro.compression_codec()
        if codec:
            compressed, length = codec.compress(content)
            encoder.write_int(length)
            encoder.write(compressed)
        else:
            encoder.write_int(len(content))
            encoder.write(content)
        encoder.write(avro.sync_bytes)
        return out.getvalue()

    def add_manifests(self: Any, manifest_files: list[Any]) -> Any:
        avro = self._writer  # pyiceberg's AvroOutputFile, header written
        first = not hasattr(self, "_icefloe_entries")
        stream = avro.output_stream
        # Only a list written into memory, in one call, can take its predecessor's sync marker
        # (its header is rewritten); a list on a file stream is encoded whole.
        reuse = (_predecessor(manifest_files) if first and self._format_version == 2
                 and isinstance(stream, io.BytesIO) else None)
        if reuse is not None:
            k, before = reuse
            head = [m if carried(self, m) else self.prepare_manifest(m) for m in manifest_files[:k]]
            stream.seek(0)
            stream.truncate()
            avro.sync_bytes = before.sync
            avro._write_header()
            blocks = ((framed(avro, self._format_version, head),) if head else ()) + before.blocks
            entries = [*head, *before.entries]
        else:
            entries = [m if carried(self, m) else self.prepare_manifest(m) for m in manifest_files]
            blocks = (framed(avro, self._format_version, entries),)
        for block in blocks:
            avro.encoder.write(block)
        self._icefloe_entries = [*getattr(self, "_icefloe_entries", ()), *entries]
        self._icefloe_blocks = (*getattr(self, "_icefloe_blocks", ()), *blocks)
        return self

    def exit_writer(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        close_writer(self, exc_type, exc_value, traceback)
        entries = getattr(self, "_icefloe_entries", None)
        if exc_type is None and entries is not None and self._format_version >= 2:
            WRITTEN.put(self._output_file.location, tuple(entries))
            if self._format_version == 2 and entries:
                BLOCKS.put((id(entries[0]), len(entries)),
                           ListBlocks(tuple(entries), self._writer.sync_bytes, self._icefloe_blocks))

    def manifests_of(io: Any, manifest_list: str) -> tuple[Any, ...]:
        found = WRITTEN.get(manifest_list)
        return found if found is not None else read_list(io, manifest_list)

    setattr(ManifestListWriter, "add_manifests", add_manifests)  # noqa: B010 - on purpose, see above
    setattr(ManifestListWriter, "__exit__", exit_writer)  # noqa: B010
    setattr(snapshots, "_manifests", manifests_of)  # noqa: B010
