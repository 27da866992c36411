"""Deletion vectors: the Puffin footer, the blob framing (length, magic, CRC) and the portable
64-bit Roaring format, decoded as the Iceberg spec says; anything else is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from catalog.puffin import (
    DV_BLOB_TYPE,
    PuffinError,
    decode_deletion_vector,
    encode_deletion_vector,
    read_deletion_vector,
    write_puffin,
)


def test_round_trip_including_positions_past_2_pow_32() -> None:
    positions = np.array([0, 1, 2, 100_000, (1 << 32) + 5, (3 << 32) + 1], dtype=np.int64)
    assert decode_deletion_vector(encode_deletion_vector(positions)).tolist() == positions.tolist()
    assert decode_deletion_vector(encode_deletion_vector([])).tolist() == []


def test_corrupt_blobs_are_refused() -> None:
    blob = bytearray(encode_deletion_vector([1, 2, 3]))
    flipped = bytearray(blob)
    flipped[10] ^= 0xFF
    with pytest.raises(PuffinError, match="CRC"):
        decode_deletion_vector(bytes(flipped))
    wrong_magic = bytearray(blob)
    wrong_magic[4] = 0
    with pytest.raises(PuffinError, match="magic"):
        decode_deletion_vector(bytes(wrong_magic))
    with pytest.raises(PuffinError, match="length"):
        decode_deletion_vector(bytes(blob[:-1]))


def test_blob_found_by_the_manifest_offset(tmp_path: Path) -> None:
    first, second = encode_deletion_vector([7]), encode_deletion_vector([1, 9, 12])
    data, spans = write_puffin([(first, {"type": DV_BLOB_TYPE, "fields": [2147483645], "properties": {
        "referenced-data-file": "a.parquet"}}), (second, {"type": DV_BLOB_TYPE, "fields": [2147483645], "properties": {
            "referenced-data-file": "b.parquet"}})])
    path = tmp_path / "dv.puffin"
    path.write_bytes(data)
    io = PyArrowFileIO()
    offset, length = spans[1]
    assert read_deletion_vector(io, str(path), offset, length).tolist() == [1, 9, 12]
    assert read_deletion_vector(io, str(path), None, None, "a.parquet").tolist() == [7]
    with pytest.raises(PuffinError, match="not in the Puffin file"):
        read_deletion_vector(io, str(path), offset + 1, length)
    path.write_bytes(data[:-4] + b"XXXX")
    with pytest.raises(PuffinError, match="magic"):
        read_deletion_vector(io, str(path), offset, length)
