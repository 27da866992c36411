"""Iceberg deletion vectors (format v3): ``deletion-vector-v1`` blobs in Puffin files.

A v3 delete file of format PUFFIN names, in its manifest entry, the blob that holds the
deletion vector of one data file (``referenced_data_file``, ``content_offset``,
``content_size_in_bytes``). The blob is framed as the Iceberg spec says: a 4-byte big-endian
length of (magic + vector), the magic ``D1 D3 39 64``, the vector — a Roaring bitmap in the
portable 64-bit format (8-byte little-endian count of 32-bit bitmaps, each a 4-byte
little-endian key holding the high 32 bits of a position, then a portable 32-bit Roaring
bitmap) — and a big-endian CRC-32 of magic + vector.

Only the blob's bytes are read (a ranged read), after the Puffin footer confirmed that a
``deletion-vector-v1`` blob starts at that offset with that length: a manifest that points
into the middle of some other blob is refused, not decoded as garbage. Positions come back
as a sorted numpy array (one ``to_array`` per 32-bit bitmap, never a Python loop per row).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np
from pyiceberg.io import FileIO
from pyroaring import BitMap

PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_BLOB_TYPE = "deletion-vector-v1"
# Footer trailer: payload size (4, LE), flags (4), magic (4).
_TRAILER = 12
_FOOTER_COMPRESSED = 1


class PuffinError(ValueError):
    """A Puffin file or deletion vector that does not follow the spec."""


def read_footer(io: FileIO, path: str) -> dict[str, Any]:
    """The Puffin footer's JSON (``{"blobs": [...], "properties": {...}}``)."""
    with io.new_input(path).open() as stream:
        stream.seek(0, 2)
        size = stream.tell()
        if size < len(PUFFIN_MAGIC) * 2 + _TRAILER:
            raise PuffinError("Puffin file too short")
        stream.seek(size - _TRAILER)
        trailer = stream.read(_TRAILER)
        payload_size, flags = struct.unpack("<ii", trailer[:8])
        if trailer[8:] != PUFFIN_MAGIC:
            raise PuffinError("not a Puffin file (bad trailing magic)")
        if flags & _FOOTER_COMPRESSED:
            raise PuffinError("compressed Puffin footers are not supported")
        start = size - _TRAILER - payload_size - len(PUFFIN_MAGIC)
        if payload_size < 0 or start < len(PUFFIN_MAGIC):
            raise PuffinError("Puffin footer size out of range")
        stream.seek(start)
        if stream.read(len(PUFFIN_MAGIC)) != PUFFIN_MAGIC:
            raise PuffinError("Puffin footer magic missing")
        footer = json.loads(stream.read(payload_size))
    if not isinstance(footer, dict) or not isinstance(footer.get("blobs", []), list):
        raise PuffinError("Puffin footer is not a blob list")
    return footer


def _dv_blob(footer: dict[str, Any], offset: int | None, length: int | None, referenced: str | None) -> dict[str, Any]:
    """The footer's deletion-vector blob at (offset, length), or the one for ``referenced``."""
    for blob in footer.get("blobs", []):
        if blob.get("type") != DV_BLOB_TYPE:
            continue
        if offset is not None and int(blob.get("offset", -1)) == offset and int(blob.get("length", -1)) == length:
            return dict(blob)
        if offset is None and (blob.get("properties") or {}).get("referenced-data-file") == referenced:
            return dict(blob)
    raise PuffinError("the deletion vector the manifest names is not in the Puffin file")


def read_deletion_vector(
    io: FileIO, path: str, offset: int | None, length: int | None, referenced: str | None = None
) -> np.ndarray:
    """Sorted deleted row positions (int64) of the deletion vector at ``offset``/``length``."""
    blob = _dv_blob(read_footer(io, path), offset, length, referenced)
    if blob.get("compression-codec"):
        raise PuffinError("deletion vectors must not be compressed")
    start, size = int(blob["offset"]), int(blob["length"])
    with io.new_input(path).open() as stream:
        stream.seek(start)
        raw = stream.read(size)
    return decode_deletion_vector(raw)


def decode_deletion_vector(raw: bytes) -> np.ndarray:
    """Positions of a framed ``deletion-vector-v1`` blob (length, magic, bitmap, CRC)."""
    if len(raw) < 12:
        raise PuffinError("deletion vector blob too short")
    (framed,) = struct.unpack(">I", raw[:4])
    if framed + 8 != len(raw):
        raise PuffinError("deletion vector length does not match its blob")
    body = raw[4 : 4 + framed]
    if body[:4] != DV_MAGIC:
        raise PuffinError("deletion vector magic missing")
    (crc,) = struct.unpack(">I", raw[4 + framed :])
    if zlib.crc32(body) & 0xFFFFFFFF != crc:
        raise PuffinError("deletion vector CRC mismatch")
    return decode_roaring64(memoryview(body)[4:])


def decode_roaring64(buf: memoryview) -> np.ndarray:
    """A Roaring bitmap in the portable 64-bit format as sorted int64 positions."""
    if len(buf) < 8:
        raise PuffinError("roaring bitmap too short")
    (count,) = struct.unpack("<Q", buf[:8])
    at, last_key = 8, -1
    parts: list[np.ndarray] = []
    for _ in range(count):
        if at + 4 > len(buf):
            raise PuffinError("roaring bitmap truncated")
        (key,) = struct.unpack("<I", buf[at : at + 4])
        at += 4
        if key <= last_key:
            raise PuffinError("roaring bitmap keys out of order")
        last_key = key
        bitmap = BitMap.deserialize(bytes(buf[at:]))
        at += len(bitmap.serialize())  # the portable size of what was read (CRoaring is exact)
        low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.int64)
        parts.append(low + (key << 32) if key else low)
    if not parts:
        return np.empty(0, dtype=np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def encode_deletion_vector(positions: np.ndarray | list[int]) -> bytes:
    """A framed ``deletion-vector-v1`` blob for ``positions`` (tests and hand-made DVs)."""
    values = np.unique(np.asarray(positions, dtype=np.int64))
    keys = np.unique(values >> 32)
    out = [struct.pack("<Q", len(keys))]
    for key in keys:
        low = (values[(values >> 32) == key] & 0xFFFFFFFF).astype(np.uint32)
        bitmap = BitMap(low.tolist())
        bitmap.run_optimize()
        out.append(struct.pack("<I", int(key)) + bitmap.serialize())
    body = DV_MAGIC + b"".join(out)
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_puffin(blobs: list[tuple[bytes, dict[str, Any]]]) -> tuple[bytes, list[tuple[int, int]]]:
    """A Puffin file holding ``blobs`` (payload, footer fields); returns it and each blob's
    (offset, length)."""
    data = bytearray(PUFFIN_MAGIC)
    metas, spans = [], []
    for payload, fields in blobs:
        spans.append((len(data), len(payload)))
        metas.append({**fields, "offset": len(data), "length": len(payload)})
        data += payload
    footer = json.dumps({"blobs": metas, "properties": {"created-by": "icefloe"}}).encode()
    data += PUFFIN_MAGIC + footer + struct.pack("<ii", len(footer), 0) + PUFFIN_MAGIC
    return bytes(data), spans
