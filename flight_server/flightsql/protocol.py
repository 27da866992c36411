"""The Flight SQL messages icefloe speaks, declared here, with a small protobuf wire codec.

Message names, field numbers and type URLs are protocol facts from the Flight SQL
specification (``FlightSql.proto``, package ``arrow.flight.protocol.sql``) and from
``Flight.proto`` (package ``arrow.flight.protocol``, for the session actions). Each message is
a dataclass whose ``FIELDS`` table says, per field number, the attribute, the wire kind and
whether it repeats; one generic encoder/decoder walks that table. Proto3 rules apply: unknown
fields are skipped, absent scalars take their zero value, ``optional`` fields decode to None.
"""

from __future__ import annotations

import dataclasses
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


def _d(default: Any = None) -> Any:
    return field(default_factory=list) if default == [] else field(default=default)


@dataclass
class AnyMsg(Message):
    type_url: str = ""
    value: bytes = b""
    FIELDS = (F(1, "type_url", "string"), F(2, "value", "bytes"))


# -- Flight SQL commands (GetFlightInfo / GetSchema descriptors) -------------------------


@dataclass
class CommandGetSqlInfo(Message):
    info: list[int] = _d([])
    FIELDS = (F(1, "info", "uint32", repeated=True),)


@dataclass
class CommandGetXdbcTypeInfo(Message):
    data_type: int | None = None
    FIELDS = (F(1, "data_type", "int32", optional=True),)


@dataclass
class CommandGetCatalogs(Message):
    FIELDS = ()


@dataclass
class CommandGetDbSchemas(Message):
    catalog: str | None = None
    db_schema_filter_pattern: str | None = None
    FIELDS = (F(1, "catalog", "string", optional=True), F(2, "db_schema_filter_pattern", "string", optional=True))


@dataclass
class CommandGetTables(Message):
    catalog: str | None = None
    db_schema_filter_pattern: str | None = None
    table_name_filter_pattern: str | None = None
    table_types: list[str] = _d([])
    include_schema: bool = False
    FIELDS = (
        F(1, "catalog", "string", optional=True),
        F(2, "db_schema_filter_pattern", "string", optional=True),
        F(3, "table_name_filter_pattern", "string", optional=True),
        F(4, "table_types", "string", repeated=True),
        F(5, "include_schema", "bool"),
    )


@dataclass
class CommandGetTableTypes(Message):
    FIELDS = ()


_TABLE_REF = (
    F(1, "catalog", "string", optional=True),
    F(2, "db_schema", "string", optional=True),
    F(3, "table", "string"),
)


@dataclass
class CommandGetPrimaryKeys(Message):
    catalog: str | None = None
    db_schema: str | None = None
    table: str = ""
    FIELDS = _TABLE_REF


@dataclass
class CommandGetExportedKeys(Message):
    catalog: str | None = None
    db_schema: str | None = None
    table: str = ""
    FIELDS = _TABLE_REF


@dataclass
class CommandGetImportedKeys(Message):
    catalog: str | None = None
    db_schema: str | None = None
    table: str = ""
    FIELDS = _TABLE_REF


@dataclass
class CommandGetCrossReference(Message):
    pk_catalog: str | None = None
    pk_db_schema: str | None = None
    pk_table: str = ""
    fk_catalog: str | None = None
    fk_db_schema: str | None = None
    fk_table: str = ""
    FIELDS = (
        F(1, "pk_catalog", "string", optional=True),
        F(2, "pk_db_schema", "string", optional=True),
        F(3, "pk_table", "string"),
        F(4, "fk_catalog", "string", optional=True),
        F(5, "fk_db_schema", "string", optional=True),
        F(6, "fk_table", "string"),
    )


@dataclass
class CommandStatementQuery(Message):
    query: str = ""
    transaction_id: bytes | None = None
    FIELDS = (F(1, "query", "string"), F(2, "transaction_id", "bytes", optional=True))


@dataclass
class SubstraitPlan(Message):
    plan: bytes = b""
    version: str = ""
    FIELDS = (F(1, "plan", "bytes"), F(2, "version", "string"))


@dataclass
class CommandStatementSubstraitPlan(Message):
    plan: SubstraitPlan | None = None
    transaction_id: bytes | None = None
    FIELDS = (F(1, "plan", "message", message=SubstraitPlan), F(2, "transaction_id", "bytes", optional=True))


@dataclass
class TicketStatementQuery(Message):
    statement_handle: bytes = b""
    FIELDS = (F(1, "statement_handle", "bytes"),)


@dataclass
class CommandPreparedStatementQuery(Message):
    prepared_statement_handle: bytes = b""
    FIELDS = (F(1, "prepared_statement_handle", "bytes"),)


@dataclass
class CommandStatementUpdate(Message):
    query: str = ""
    transaction_id: bytes | None = None
    FIELDS = (F(1, "query", "string"), F(2, "transaction_id", "bytes", optional=True))


@dataclass
class CommandPreparedStatementUpdate(Message):
    prepared_statement_handle: bytes = b""
    FIELDS = (F(1, "prepared_statement_handle", "bytes"),)


@dataclass
class TableDefinitionOptions(Message):
    # TableNotExistOption: 0 unspecified, 1 create, 2 fail.
    # TableExistsOption: 0 unspecified, 1 fail, 2 append, 3 replace.
    if_not_exist: int = 0
    if_exists: int = 0
    FIELDS = (F(1, "if_not_exist", "enum"), F(2, "if_exists", "enum"))


@dataclass
class StringMapEntry(Message):
    key: str = ""
    value: str = ""
    FIELDS = (F(1, "key", "string"), F(2, "value", "string"))


@dataclass
class CommandStatementIngest(Message):
    table_definition_options: TableDefinitionOptions | None = None
    table: str = ""
    schema: str | None = None
    catalog: str | None = None
    temporary: bool = False
    transaction_id: bytes | None = None
    options: list[StringMapEntry] = _d([])
    FIELDS = (
        F(1, "table_definition_options", "message", message=TableDefinitionOptions),
        F(2, "table", "string"),
        F(3, "schema", "string", optional=True),
        F(4, "catalog", "string", optional=True),
        F(5, "temporary", "bool"),
        F(6, "transaction_id", "bytes", optional=True),
        F(1000, "options", "message", repeated=True, message=StringMapEntry),
    )


# -- results -------------------------------------------------------------------------------


@dataclass
class DoPutUpdateResult(Message):
    record_count: int = 0
    FIELDS = (F(1, "record_count", "int64"),)


@dataclass
class DoPutPreparedStatementResult(Message):
    prepared_statement_handle: bytes | None = None
    FIELDS = (F(1, "prepared_statement_handle", "bytes", optional=True),)


# -- actions ---------------------------------------------------------------------------------


@dataclass
class ActionCreatePreparedStatementRequest(Message):
    query: str = ""
    transaction_id: bytes | None = None
    FIELDS = (F(1, "query", "string"), F(2, "transaction_id", "bytes", optional=True))


@dataclass
class ActionCreatePreparedSubstraitPlanRequest(Message):
    plan: SubstraitPlan | None = None
    transaction_id: bytes | None = None
    FIELDS = (F(1, "plan", "message", message=SubstraitPlan), F(2, "transaction_id", "bytes", optional=True))


@dataclass
class ActionCreatePreparedStatementResult(Message):
    prepared_statement_handle: bytes = b""
    dataset_schema: bytes = b""
    parameter_schema: bytes = b""
    # Added to the spec in 2026 (apache/arrow GH-49497): tells drivers whether to execute the
    # statement as CommandPreparedStatementUpdate (true) or ...Query (false).
    is_update: bool | None = None
    FIELDS = (
        F(1, "prepared_statement_handle", "bytes"),
        F(2, "dataset_schema", "bytes"),
        F(3, "parameter_schema", "bytes"),
        F(4, "is_update", "bool", optional=True),
    )


@dataclass
class ActionClosePreparedStatementRequest(Message):
    prepared_statement_handle: bytes = b""
    FIELDS = (F(1, "prepared_statement_handle", "bytes"),)


@dataclass
class ActionBeginTransactionRequest(Message):
    FIELDS = ()


@dataclass
class ActionBeginTransactionResult(Message):
    transaction_id: bytes = b""
    FIELDS = (F(1, "transaction_id", "bytes"),)


# ActionEndTransactionRequest.action (EndTransaction enum)
END_TRANSACTION_UNSPECIFIED, END_TRANSACTION_COMMIT, END_TRANSACTION_ROLLBACK = 0, 1, 2


@dataclass
class ActionBeginSavepointRequest(Message):
    transaction_id: bytes = b""
    name: str = ""
    FIELDS = (F(1, "transaction_id", "bytes"), F(2, "name", "string"))


@dataclass
class ActionEndTransactionRequest(Message):
    transaction_id: bytes = b""
    action: int = 0
    FIELDS = (F(1, "transaction_id", "bytes"), F(2, "action", "enum"))


@dataclass
class ActionEndSavepointRequest(Message):
    savepoint_id: bytes = b""
    action: int = 0
    FIELDS = (F(1, "savepoint_id", "bytes"), F(2, "action", "enum"))


@dataclass
class ActionCancelQueryRequest(Message):
    info: bytes = b""
    FIELDS = (F(1, "info", "bytes"),)


# -- session options (Flight.proto, package arrow.flight.protocol; not Any-wrapped) -------


@dataclass
class StringListValue(Message):
    values: list[str] = _d([])
    FIELDS = (F(1, "values", "string", repeated=True),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class SessionOptionValue(Message):
    """oneof option_value; all fields None means the option is unset (removal)."""

    string_value: str | None = None
    bool_value: bool | None = None
    int64_value: int | None = None
    double_value: float | None = None
    string_list_value: StringListValue | None = None
    FIELDS = (
        F(1, "string_value", "string", optional=True),
        F(2, "bool_value", "bool", optional=True),
        F(3, "int64_value", "sfixed64", optional=True),
        F(4, "double_value", "double", optional=True),
        F(5, "string_list_value", "message", message=StringListValue),
    )
    PACKAGE = FLIGHT_PREFIX

    def python_value(self) -> str | bool | int | float | list[str] | None:
        for f in self.FIELDS:
            v = getattr(self, f.name)
            if v is not None:
                return list(v.values) if isinstance(v, StringListValue) else v
        return None


@dataclass
class SessionOptionEntry(Message):
    key: str = ""
    value: SessionOptionValue | None = None
    FIELDS = (F(1, "key", "string"), F(2, "value", "message", message=SessionOptionValue))
    PACKAGE = FLIGHT_PREFIX


@dataclass
class SetSessionOptionsRequest(Message):
    session_options: list[SessionOptionEntry] = _d([])
    FIELDS = (F(1, "session_options", "message", repeated=True, message=SessionOptionEntry),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class SetSessionOptionsError(Message):
    # ErrorValue: 0 unspecified, 1 invalid name, 2 invalid value, 3 error.
    value: int = 0
    FIELDS = (F(1, "value", "enum"),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class SetSessionOptionsErrorEntry(Message):
    key: str = ""
    value: SetSessionOptionsError | None = None
    FIELDS = (F(1, "key", "string"), F(2, "value", "message", message=SetSessionOptionsError))
    PACKAGE = FLIGHT_PREFIX


@dataclass
class SetSessionOptionsResult(Message):
    errors: list[SetSessionOptionsErrorEntry] = _d([])
    FIELDS = (F(1, "errors", "message", repeated=True, message=SetSessionOptionsErrorEntry),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class GetSessionOptionsRequest(Message):
    FIELDS = ()
    PACKAGE = FLIGHT_PREFIX


@dataclass
class GetSessionOptionsResult(Message):
    session_options: list[SessionOptionEntry] = _d([])
    FIELDS = (F(1, "session_options", "message", repeated=True, message=SessionOptionEntry),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class CloseSessionRequest(Message):
    FIELDS = ()
    PACKAGE = FLIGHT_PREFIX


@dataclass
class CloseSessionResult(Message):
    # Status: 0 unspecified, 1 closed, 2 closing, 3 not closeable.
    status: int = 0
    FIELDS = (F(1, "status", "enum"),)
    PACKAGE = FLIGHT_PREFIX


# Every command a FlightDescriptor may carry, by type URL.
DESCRIPTOR_COMMANDS: dict[str, type[Message]] = {
    cls.full_type_url(): cls
    for cls in (
        CommandGetSqlInfo,
        CommandGetXdbcTypeInfo,
        CommandGetCatalogs,
        CommandGetDbSchemas,
        CommandGetTables,
        CommandGetTableTypes,
        CommandGetPrimaryKeys,
        CommandGetExportedKeys,
        CommandGetImportedKeys,
        CommandGetCrossReference,
        CommandStatementQuery,
        CommandStatementSubstraitPlan,
        CommandPreparedStatementQuery,
        CommandStatementUpdate,
        CommandPreparedStatementUpdate,
        CommandStatementIngest,
        TicketStatementQuery,
    )
}


def decode_command(data: bytes) -> Message:
    """Decode an Any-packed Flight SQL command; ProtocolError when it is not one we know."""
    url, value = unpack_any(data)
    cls = DESCRIPTOR_COMMANDS.get(url)
    if cls is None:
        raise ProtocolError(f"unknown command type {url!r}")
    return cls.decode(value)


def fields_of(msg: Message) -> dict[str, Any]:
    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}  # type: ignore[arg-type]
