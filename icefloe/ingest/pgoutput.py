"""Decoding PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

The messages are those of the streaming replication protocol's "Logical Replication Message
Formats" chapter: Begin, Relation, Type, Origin, Insert, Update, Delete, Truncate, Commit.
Column values come as text (``pgoutput`` sends text unless asked for binary), and are turned
into Arrow values by the column's type OID from the Relation message (``arrow_type`` and
``convert``), the same mapping the initial snapshot uses, so snapshot rows and streamed rows
have one schema.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01


class DecodeError(ValueError):
    """A message this decoder cannot read (the message says which)."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d default, n nothing, f full, i index
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time_us: int
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time_us: int


@dataclass(frozen=True)
class Change:
    """An Insert (new), Update (old may be None, new) or Delete (old: key or full image)."""

    kind: str  # "insert" | "update" | "delete"
    relation_oid: int
    old: tuple[Any, ...] | None
    new: tuple[Any, ...] | None
    old_is_key: bool = False  # old holds only the replica identity's key columns ('K')


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]


class Unchanged:
    """A TOASTed value the update did not change, so pgoutput did not send it."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise DecodeError("truncated pgoutput message")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("unterminated string in a pgoutput message")
        text = self.data[self.at:end].decode("utf-8")
        self.at = end + 1
        return text

    def tuple_data(self) -> tuple[Any, ...]:
        values: list[Any] = []
        for _ in range(self.take("!h")):
            kind = self.take("!c")
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind in (b"t", b"b"):
                length = self.take("!i")
                raw = self.data[self.at:self.at + length]
                self.at += length
                values.append(raw.decode("utf-8") if kind == b"t" else bytes(raw))
            else:
                raise DecodeError(f"unknown tuple column kind {kind!r}")
        return tuple(values)


def decode(data: bytes) -> Begin | Commit | Relation | Change | Truncate | None:
    """One message; None for the kinds a change stream does not need (Type, Origin, Message)."""
    reader = _Reader(bytes(data))
    tag = reader.take("!c")
    if tag == b"B":
        return Begin(reader.take("!Q"), reader.take("!q") + PG_EPOCH_US, reader.take("!I"))
    if tag == b"C":
        reader.take("!b")
        return Commit(reader.take("!Q"), reader.take("!Q"), reader.take("!q") + PG_EPOCH_US)
    if tag == b"R":
        oid, namespace, name = reader.take("!I"), reader.string(), reader.string()
        identity = reader.take("!c").decode()
        columns = []
        for _ in range(reader.take("!h")):
            flags, column = reader.take("!b"), reader.string()
            columns.append(Column(column, reader.take("!I"), reader.take("!i"), bool(flags & 1)))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if tag == b"I":
        oid = reader.take("!I")
        if reader.take("!c") != b"N":
            raise DecodeError("an Insert message without its new tuple")
        return Change("insert", oid, None, reader.tuple_data())
    if tag == b"U":
        oid = reader.take("!I")
        marker, old, old_is_key = reader.take("!c"), None, False
        if marker in (b"K", b"O"):
            old, old_is_key = reader.tuple_data(), marker == b"K"
            marker = reader.take("!c")
        if marker != b"N":
            raise DecodeError("an Update message without its new tuple")
        return Change("update", oid, old, reader.tuple_data(), old_is_key)
    if tag == b"D":
        oid = reader.take("!I")
        marker = reader.take("!c")
        if marker not in (b"K", b"O"):
            raise DecodeError("a Delete message without its old tuple")
        return Change("delete", oid, reader.tuple_data(), None, marker == b"K")
    if tag == b"T":
        count = reader.take("!I")
        reader.take("!b")
        return Truncate(tuple(reader.take("!I") for _ in range(count)))
    if tag in (b"Y", b"O", b"M"):
        return None
    raise DecodeError(f"unknown pgoutput message {tag!r}")


# -- types ------------------------------------------------------------------------------------

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID, JSON = 16, 17, 20, 21, 23, 25, 26, 114
FLOAT4, FLOAT8, BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ = 700, 701, 1042, 1043, 1082, 1083, 1114, 1184
NUMERIC, UUID, JSONB, NAME = 1700, 2950, 3802, 19


def arrow_type(type_oid: int, typmod: int) -> pa.DataType:
    """The Arrow type a column of this PostgreSQL type becomes (anything unknown: text)."""
    if type_oid == BOOL:
        return pa.bool_()
    if type_oid == INT2:
        return pa.int16()
    if type_oid == INT4:
        return pa.int32()
    if type_oid in (INT8, OID):
        return pa.int64()
    if type_oid == FLOAT4:
        return pa.float32()
    if type_oid == FLOAT8:
        return pa.float64()
    if type_oid == NUMERIC and typmod >= 4:
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        if 0 < precision <= 38 and 0 <= scale <= precision:
            return pa.decimal128(precision, scale)
    if type_oid == DATE:
        return pa.date32()
    if type_oid == TIME:
        return pa.time64("us")
    if type_oid == TIMESTAMP:
        return pa.timestamp("us")
    if type_oid == TIMESTAMPTZ:
        return pa.timestamp("us", tz="UTC")
    if type_oid == BYTEA:
        return pa.binary()
    return pa.string()  # text, varchar, char, uuid, json(b), unconstrained numeric, enums, ...


def _timestamp(text: str) -> datetime.datetime:
    if text.endswith(("+00", "-00")) or (len(text) > 3 and text[-3] in "+-" and text[-2:].isdigit()):
        text += ":00"
    return datetime.datetime.fromisoformat(text)


def _timestamptz(text: str) -> datetime.datetime:
    return _timestamp(text).astimezone(datetime.UTC)


def converter(type_oid: int, typmod: int) -> Callable[[str], Any]:
    """Text as PostgreSQL prints it (session TimeZone UTC, DateStyle ISO) -> a Python value of
    ``arrow_type``."""
    kind = arrow_type(type_oid, typmod)
    if pa.types.is_boolean(kind):
        # boolout() prints "t"/"f" (pgoutput); a ::text cast prints "true"/"false" (snapshot).
        return lambda text: text in ("t", "true")
    if pa.types.is_integer(kind):
        return int
    if pa.types.is_floating(kind):
        return float
    if pa.types.is_decimal(kind):
        return decimal.Decimal
    if pa.types.is_date(kind):
        return datetime.date.fromisoformat
    if pa.types.is_time(kind):
        return datetime.time.fromisoformat
    if pa.types.is_timestamp(kind):
        return _timestamptz if kind.tz else _timestamp
    if pa.types.is_binary(kind):
        return lambda text: bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()
    return str


def relation_schema(relation: Relation) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.type_oid, c.typmod)) for c in relation.columns])


def rows_table(relation: Relation, rows: list[tuple[Any, ...]]) -> pa.Table:
    """Text tuples of ``relation`` as an Arrow table of its schema."""
    schema = relation_schema(relation)
    arrays = []
    for index, column in enumerate(relation.columns):
        convert = converter(column.type_oid, column.typmod)
        values = [None if row[index] is None else convert(row[index]) for row in rows]
        arrays.append(pa.array(values, schema.field(index).type))
    return pa.Table.from_arrays(arrays, schema=schema)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
