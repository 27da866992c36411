"""A tiny protobuf encoder for tests, independent of the server's codec (so the two check each other)."""

from __future__ import annotations

SQL = "type.googleapis.com/arrow.flight.protocol.sql."


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def any_of(message: str, body: bytes = b"", prefix: str = SQL) -> bytes:
    return field_bytes(1, (prefix + message).encode()) + field_bytes(2, body)


def statement_query(sql: str) -> bytes:
    return any_of("CommandStatementQuery", field_bytes(1, sql.encode()))


def read_fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Decode one message level (varint and length-delimited fields only)."""
    out: dict[int, list[bytes | int]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            out.setdefault(number, []).append(value)
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            out.setdefault(number, []).append(data[pos : pos + length])
            pos += length
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
