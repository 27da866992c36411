"""A small protobuf wire codec for the Flight SQL messages ``flightsql.protocol`` declares.

Each message is a dataclass whose ``FIELDS`` table says, per field number, the attribute, the
wire kind and whether it repeats; the generic encoder/decoder of ``Message`` walks that table.
Proto3 rules apply: unknown fields are skipped, absent scalars take their zero value,
``optional`` fields decode to None. ``google.protobuf.Any`` wraps commands (``pack_any``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
FLIGHT_PREFIX = "type.googleapis.com/arrow.flight.protocol."

# Wire types.
VARINT, I64, LEN, I32 = 0, 1, 2, 5

# kind -> wire type
_WIRE = {
    "string": LEN,
    "bytes": LEN,
    "message": LEN,
    "bool": VARINT,
    "uint32": VARINT,
    "int32": VARINT,
    "int64": VARINT,
    "enum": VARINT,
    "sfixed64": I64,
    "double": I64,
}
_MAX_DEPTH = 16


class ProtocolError(ValueError):
    """Bytes that are not the message they claim to be."""


@dataclass(frozen=True)
class F:
    """One field of a message: number, attribute name, wire kind, repetition, sub-message."""

    number: int
    name: str
    kind: str
    repeated: bool = False
    message: type[Message] | None = None
    optional: bool = False  # proto3 ``optional``: absent decodes to None


M = TypeVar("M", bound="Message")


class Message:
    """Base of every declared message (subclasses are dataclasses with a FIELDS table)."""

    FIELDS: ClassVar[tuple[F, ...]] = ()
    PACKAGE: ClassVar[str] = SQL_PREFIX

    @classmethod
    def full_type_url(cls) -> str:
        return cls.PACKAGE + cls.__name__

    # -- decoding ------------------------------------------------------------------------

    @classmethod
    def decode(cls: type[M], data: bytes, _depth: int = 0) -> M:
        if _depth > _MAX_DEPTH:
            raise ProtocolError("message nesting too deep")
        by_number = {f.number: f for f in cls.FIELDS}
        values: dict[str, Any] = {}
        for number, wire, raw in _fields(data):
            spec = by_number.get(number)
            if spec is None:
                continue  # unknown field: proto3 skips it
            packed = spec.repeated and wire == LEN and _WIRE[spec.kind] == VARINT
            if wire != _WIRE[spec.kind] and not packed:
                raise ProtocolError(f"{cls.__name__}.{spec.name}: wrong wire type {wire}")
            if packed:
                assert isinstance(raw, bytes)
                items: list[Any] = [_scalar(spec, VARINT, v) for v in _packed_varints(raw)]
                values.setdefault(spec.name, []).extend(items)
                continue
            value = _convert(spec, raw, _depth)
            if spec.repeated:
                values.setdefault(spec.name, []).append(value)
            else:
                values[spec.name] = value  # last one wins, as in protobuf
        return cls(**values)

    @classmethod
    def unpack(cls: type[M], any_bytes: bytes) -> M:
        """Decode an Any that must hold this message."""
        url, value = unpack_any(any_bytes)
        if url != cls.full_type_url():
            raise ProtocolError(f"expected {cls.full_type_url()}, got {url!r}")
        return cls.decode(value)

    # -- encoding ------------------------------------------------------------------------

    def encode(self) -> bytes:
        out = bytearray()
        for spec in self.FIELDS:
            value = getattr(self, spec.name)
            if value is None:
                continue
            for item in value if spec.repeated else [value]:
                if not spec.repeated and not spec.optional and _is_default(spec, item):
                    continue
                out += _key(spec.number, _WIRE[spec.kind]) + _encode_value(spec, item)
        return bytes(out)

    def pack(self) -> bytes:
        """This message wrapped in a ``google.protobuf.Any``."""
        return pack_any(self.full_type_url(), self.encode())


# -- wire primitives ---------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtocolError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ProtocolError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtocolError("field number 0")
        raw: int | bytes
        if wire == VARINT:
            raw, pos = _varint(data, pos)
        elif wire == I64:
            if pos + 8 > len(data):
                raise ProtocolError("truncated fixed64")
            raw, pos = data[pos : pos + 8], pos + 8
        elif wire == I32:
            if pos + 4 > len(data):
                raise ProtocolError("truncated fixed32")
            raw, pos = data[pos : pos + 4], pos + 4
        elif wire == LEN:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtocolError("truncated length-delimited field")
            raw, pos = bytes(data[pos : pos + length]), pos + length
        else:
            raise ProtocolError(f"unsupported wire type {wire}")
        out.append((number, wire, raw))
    return out


def _packed_varints(raw: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(raw):
        v, pos = _varint(raw, pos)
        out.append(v)
    return out


def _signed(v: int, bits: int) -> int:
    v &= (1 << 64) - 1
    if v >= 1 << 63:
        v -= 1 << 64
    if bits == 32:
        v = ((v + (1 << 31)) % (1 << 32)) - (1 << 31)
    return v


def _scalar(spec: F, wire: int, raw: int | bytes) -> Any:
    kind = spec.kind
    if kind == "bool":
        return bool(raw)
    if kind == "uint32":
        return int(raw) & 0xFFFFFFFF
    if kind in ("int32", "enum"):
        return _signed(int(raw), 32)
    if kind == "int64":
        return _signed(int(raw), 64)
    if kind == "sfixed64":
        assert isinstance(raw, bytes)
        return struct.unpack("<q", raw)[0]
    if kind == "double":
        assert isinstance(raw, bytes)
        return struct.unpack("<d", raw)[0]
    raise ProtocolError(f"{spec.name}: not a scalar")


def _convert(spec: F, raw: int | bytes, depth: int) -> Any:
    if spec.kind == "string":
        assert isinstance(raw, bytes)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{spec.name}: not valid UTF-8") from exc
    if spec.kind == "bytes":
        return raw
    if spec.kind == "message":
        assert spec.message is not None and isinstance(raw, bytes)
        return spec.message.decode(raw, depth + 1)
    return _scalar(spec, _WIRE[spec.kind], raw)


def _encode_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _encode_varint((number << 3) | wire)


def _is_default(spec: F, value: Any) -> bool:
    if spec.kind == "message":
        return False
    return value in (0, False, "", b"") and not (spec.kind == "double" and str(value) == "-0.0")


def _encode_value(spec: F, value: Any) -> bytes:
    kind = spec.kind
    if kind == "string":
        data: bytes = value.encode("utf-8")
        return _encode_varint(len(data)) + data
    if kind == "bytes":
        return _encode_varint(len(value)) + bytes(value)
    if kind == "message":
        data = bytes(value.encode())
        return _encode_varint(len(data)) + data
    if kind == "sfixed64":
        return bytes(struct.pack("<q", value))
    if kind == "double":
        return bytes(struct.pack("<d", value))
    return _encode_varint(int(value))


def pack_any(type_url: str, value: bytes) -> bytes:
    return AnyMsg(type_url=type_url, value=value).encode()


def unpack_any(data: bytes) -> tuple[str, bytes]:
    msg = AnyMsg.decode(data)
    if not msg.type_url:
        raise ProtocolError("not a google.protobuf.Any (no type_url)")
    return msg.type_url, msg.value


def default(value: Any = None) -> Any:
    """A dataclass field default (a fresh list for ``[]``)."""
    return field(default_factory=list) if value == [] else field(default=value)


@dataclass
class AnyMsg(Message):
    type_url: str = ""
    value: bytes = b""
    FIELDS = (F(1, "type_url", "string"), F(2, "value", "bytes"))
