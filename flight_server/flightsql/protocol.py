"""The Flight SQL messages icefloe speaks, declared here; ``wire_codec`` encodes and decodes them.

Message names, field numbers and type URLs are protocol facts from the Flight SQL
specification (``FlightSql.proto``, package ``arrow.flight.protocol.sql``) and from
``Flight.proto`` (package ``arrow.flight.protocol``, for the session actions).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from flight_server.flightsql.wire_codec import FLIGHT_PREFIX, F, default, unpack_any
from flight_server.flightsql.wire_codec import Message as Message  # what a decoded command is
from flight_server.flightsql.wire_codec import ProtocolError as ProtocolError  # what a bad one raises

# -- Flight SQL commands (GetFlightInfo / GetSchema descriptors) -------------------------


@dataclass
class CommandGetSqlInfo(Message):
    info: list[int] = default([])
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
    table_types: list[str] = default([])
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
    options: list[StringMapEntry] = default([])
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
    values: list[str] = default([])
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
    session_options: list[SessionOptionEntry] = default([])
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
    errors: list[SetSessionOptionsErrorEntry] = default([])
    FIELDS = (F(1, "errors", "message", repeated=True, message=SetSessionOptionsErrorEntry),)
    PACKAGE = FLIGHT_PREFIX


@dataclass
class GetSessionOptionsRequest(Message):
    FIELDS = ()
    PACKAGE = FLIGHT_PREFIX


@dataclass
class GetSessionOptionsResult(Message):
    session_options: list[SessionOptionEntry] = default([])
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
