"""Flight SQL metadata commands: result schemas exactly as the spec gives them, and their rows.

Nullability matters: the ADBC driver compares these schemas, so every ``not null`` of the
spec is ``nullable=False`` here.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.types import DecimalType, ListType, MapType, StructType

from catalog import views
from flight_server import __version__
from flight_server.engine import CATALOG_NAME
from flight_server.engine.iceberg_source import small_types
from flight_server.engine.origins import ColumnOrigin
from flight_server.flightsql import protocol as p


def _f(name: str, typ: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


CATALOGS_SCHEMA = pa.schema([_f("catalog_name", pa.utf8(), False)])
DB_SCHEMAS_SCHEMA = pa.schema([_f("catalog_name", pa.utf8()), _f("db_schema_name", pa.utf8(), False)])
TABLES_SCHEMA = pa.schema(
    [
        _f("catalog_name", pa.utf8()),
        _f("db_schema_name", pa.utf8()),
        _f("table_name", pa.utf8(), False),
        _f("table_type", pa.utf8(), False),
    ]
)
TABLES_SCHEMA_WITH_SCHEMA = TABLES_SCHEMA.append(_f("table_schema", pa.binary(), False))
TABLE_TYPES_SCHEMA = pa.schema([_f("table_type", pa.utf8(), False)])
PRIMARY_KEYS_SCHEMA = pa.schema(
    [
        _f("catalog_name", pa.utf8()),
        _f("db_schema_name", pa.utf8()),
        _f("table_name", pa.utf8(), False),
        _f("column_name", pa.utf8(), False),
        _f("key_name", pa.utf8()),
        _f("key_sequence", pa.int32(), False),
    ]
)
FOREIGN_KEYS_SCHEMA = pa.schema(
    [
        _f("pk_catalog_name", pa.utf8()),
        _f("pk_db_schema_name", pa.utf8()),
        _f("pk_table_name", pa.utf8(), False),
        _f("pk_column_name", pa.utf8(), False),
        _f("fk_catalog_name", pa.utf8()),
        _f("fk_db_schema_name", pa.utf8()),
        _f("fk_table_name", pa.utf8(), False),
        _f("fk_column_name", pa.utf8(), False),
        _f("key_sequence", pa.int32(), False),
        _f("fk_key_name", pa.utf8()),
        _f("pk_key_name", pa.utf8()),
        _f("update_rule", pa.uint8(), False),
        _f("delete_rule", pa.uint8(), False),
    ]
)
_SQL_INFO_VALUE = pa.dense_union(
    [
        _f("string_value", pa.utf8()),
        _f("bool_value", pa.bool_()),
        _f("bigint_value", pa.int64()),
        _f("int32_bitmask", pa.int32()),
        _f("string_list", pa.list_(pa.utf8())),
        _f("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
    ]
)
SQL_INFO_SCHEMA = pa.schema([_f("info_name", pa.uint32(), False), _f("value", _SQL_INFO_VALUE, False)])
XDBC_TYPE_INFO_SCHEMA = pa.schema(
    [
        _f("type_name", pa.utf8(), False),
        _f("data_type", pa.int32(), False),
        _f("column_size", pa.int32()),
        _f("literal_prefix", pa.utf8()),
        _f("literal_suffix", pa.utf8()),
        _f("create_params", pa.list_(pa.field("item", pa.utf8(), nullable=False))),
        _f("nullable", pa.int32(), False),
        _f("case_sensitive", pa.bool_(), False),
        _f("searchable", pa.int32(), False),
        _f("unsigned_attribute", pa.bool_()),
        _f("fixed_prec_scale", pa.bool_(), False),
        _f("auto_increment", pa.bool_()),
        _f("local_type_name", pa.utf8()),
        _f("minimum_scale", pa.int32()),
        _f("maximum_scale", pa.int32()),
        _f("sql_data_type", pa.int32(), False),
        _f("datetime_subcode", pa.int32()),
        _f("num_prec_radix", pa.int32()),
        _f("interval_precision", pa.int32()),
    ]
)

TABLE_TYPES = ["TABLE", "VIEW"]  # VIEW: Iceberg views (catalog.views)

# SqlInfo ids (FlightSql.proto enum SqlInfo) and icefloe's answers.
SERVER_NAME, SERVER_VERSION, SERVER_ARROW_VERSION, SERVER_READ_ONLY = 0, 1, 2, 3
SERVER_SQL, SERVER_SUBSTRAIT, SERVER_TRANSACTION, SERVER_CANCEL = 4, 5, 8, 9
SERVER_BULK_INGESTION, SERVER_INGEST_TRANSACTIONS = 10, 11
SERVER_STATEMENT_TIMEOUT, SERVER_TRANSACTION_TIMEOUT = 100, 101
SQL_DDL_CATALOG, SQL_DDL_SCHEMA, SQL_DDL_TABLE = 500, 501, 502
SQL_IDENTIFIER_CASE, SQL_IDENTIFIER_QUOTE_CHAR, SQL_QUOTED_IDENTIFIER_CASE = 503, 504, 505
SQL_ALL_TABLES_ARE_SELECTABLE, SQL_NULL_ORDERING, SQL_KEYWORDS = 506, 507, 508
SQL_SEARCH_STRING_ESCAPE, SQL_SUPPORTS_COLUMN_ALIASING = 513, 515
SQL_SCHEMA_TERM, SQL_CATALOG_TERM, SQL_CATALOG_AT_START = 529, 531, 532
SQL_DEFAULT_TRANSACTION_ISOLATION, SQL_TRANSACTIONS_SUPPORTED = 562, 563
SQL_SUPPORTED_TRANSACTIONS_ISOLATION_LEVELS = 564
SQL_DATA_DEFINITION_CAUSES_TRANSACTION_COMMIT, SQL_DATA_DEFINITIONS_IN_TRANSACTIONS_IGNORED = 565, 566
_REPEATABLE_READ = 3  # SqlTransactionIsolationLevel: tables read at the snapshot first seen

_STRING, _BOOL, _BIGINT, _BITMASK, _STRING_LIST = 0, 1, 2, 3, 4


def sql_info_values() -> dict[int, tuple[int, Any]]:
    return {
        SERVER_NAME: (_STRING, "icefloe"),
        SERVER_VERSION: (_STRING, __version__),
        SERVER_ARROW_VERSION: (_STRING, pa.__version__),
        SERVER_READ_ONLY: (_BOOL, False),
        SERVER_SQL: (_BOOL, True),
        SERVER_SUBSTRAIT: (_BOOL, False),
        # SqlSupportedTransaction TRANSACTION (no savepoints): flight_server.transactions
        SERVER_TRANSACTION: (_BITMASK, 1),
        SERVER_CANCEL: (_BOOL, False),
        SERVER_BULK_INGESTION: (_BOOL, True),
        SERVER_INGEST_TRANSACTIONS: (_BOOL, True),  # ingest into existing tables inside a transaction
        SERVER_STATEMENT_TIMEOUT: (_BITMASK, 0),  # stateless handles never time out
        SERVER_TRANSACTION_TIMEOUT: (_BITMASK, 0),
        SQL_DDL_CATALOG: (_BOOL, False),
        SQL_DDL_SCHEMA: (_BOOL, True),  # CREATE / DROP SCHEMA (flight_server.sqlwrite)
        SQL_DDL_TABLE: (_BOOL, True),  # CREATE / DROP / ALTER TABLE
        SQL_IDENTIFIER_CASE: (_BITMASK, 1),  # SqlSupportedCaseSensitivity CASE_INSENSITIVE (DuckDB)
        SQL_IDENTIFIER_QUOTE_CHAR: (_STRING, '"'),
        SQL_QUOTED_IDENTIFIER_CASE: (_BITMASK, 1),
        SQL_ALL_TABLES_ARE_SELECTABLE: (_BOOL, True),
        SQL_NULL_ORDERING: (_BITMASK, 3),  # SqlNullOrdering NULLS_SORTED_AT_END (DuckDB default)
        SQL_KEYWORDS: (_STRING_LIST, ["ASOF", "PIVOT", "UNPIVOT", "QUALIFY", "SAMPLE"]),
        SQL_SEARCH_STRING_ESCAPE: (_STRING, "\\"),
        SQL_SUPPORTS_COLUMN_ALIASING: (_BOOL, True),
        SQL_SCHEMA_TERM: (_STRING, "schema"),
        SQL_CATALOG_TERM: (_STRING, "catalog"),
        SQL_CATALOG_AT_START: (_BOOL, True),
        SQL_DEFAULT_TRANSACTION_ISOLATION: (_BIGINT, _REPEATABLE_READ),
        SQL_TRANSACTIONS_SUPPORTED: (_BOOL, True),
        SQL_SUPPORTED_TRANSACTIONS_ISOLATION_LEVELS: (_BITMASK, 1 << _REPEATABLE_READ),
        # DDL inside a transaction lands at once, outside it: it neither commits the transaction's
        # staged writes nor is ignored (flightsql.transaction_handler.is_data_change).
        SQL_DATA_DEFINITION_CAUSES_TRANSACTION_COMMIT: (_BOOL, False),
        SQL_DATA_DEFINITIONS_IN_TRANSACTIONS_IGNORED: (_BOOL, False),
    }


def sql_info_table(cmd: p.CommandGetSqlInfo) -> pa.Table:
    values = sql_info_values()
    wanted = list(cmd.info) if cmd.info else sorted(values)
    ids: list[int] = []
    type_codes: list[int] = []
    offsets: list[int] = []
    children: list[list[Any]] = [[] for _ in range(6)]
    for info in wanted:
        if info not in values:
            continue  # the spec lets servers skip ids they do not know
        code, value = values[info]
        ids.append(info)
        type_codes.append(code)
        offsets.append(len(children[code]))
        children[code].append(value)
    child_arrays = [pa.array(children[i], type=_SQL_INFO_VALUE.field(i).type) for i in range(6)]
    union = pa.UnionArray.from_dense(
        pa.array(type_codes, pa.int8()),
        pa.array(offsets, pa.int32()),
        child_arrays,
        [_SQL_INFO_VALUE.field(i).name for i in range(6)],
        list(range(6)),
    )
    return pa.Table.from_arrays([pa.array(ids, pa.uint32()), union], schema=SQL_INFO_SCHEMA)


def like_to_regex(pattern: str) -> re.Pattern[str]:
    """A SQL LIKE pattern (% and _, backslash escapes) as an anchored regex."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _matches(pattern: str | None, value: str) -> bool:
    return pattern is None or like_to_regex(pattern).fullmatch(value) is not None


def catalog_matches(catalog: str | None) -> bool:
    return catalog is None or catalog == CATALOG_NAME


class Metadata:
    """Answers the metadata commands from the catalog."""

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog

    def namespaces(self) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        todo: list[tuple[str, ...]] = [()]
        while todo:
            parent = todo.pop()
            for ns in self.catalog.list_namespaces(parent):
                ns = tuple(ns)
                if ns and ns not in out:
                    out.append(ns)
                    todo.append(ns)
        return sorted(out)

    def catalogs(self) -> pa.Table:
        return pa.Table.from_pylist([{"catalog_name": CATALOG_NAME}], schema=CATALOGS_SCHEMA)

    def db_schemas(self, cmd: p.CommandGetDbSchemas) -> pa.Table:
        rows = []
        if catalog_matches(cmd.catalog):
            for ns in self.namespaces():
                name = ".".join(ns)
                if _matches(cmd.db_schema_filter_pattern, name):
                    rows.append({"catalog_name": CATALOG_NAME, "db_schema_name": name})
        return pa.Table.from_pylist(rows, schema=DB_SCHEMAS_SCHEMA)

    def tables(self, cmd: p.CommandGetTables) -> pa.Table:
        schema = TABLES_SCHEMA_WITH_SCHEMA if cmd.include_schema else TABLES_SCHEMA
        rows: list[dict[str, Any]] = []
        wanted = {t.upper() for t in cmd.table_types} if cmd.table_types else {"TABLE", "VIEW"}
        if catalog_matches(cmd.catalog) and wanted & {"TABLE", "VIEW"}:
            for ns in self.namespaces():
                db_schema = ".".join(ns)
                if not _matches(cmd.db_schema_filter_pattern, db_schema):
                    continue
                found = [(ident[-1], "TABLE") for ident in self.catalog.list_tables(ns)] if "TABLE" in wanted else []
                if "VIEW" in wanted:
                    found += [(ident[-1], "VIEW") for ident in views.list_views(self.catalog, ns)]
                for name, table_type in sorted(found):
                    if not _matches(cmd.table_name_filter_pattern, name):
                        continue
                    row: dict[str, Any] = {
                        "catalog_name": CATALOG_NAME,
                        "db_schema_name": db_schema,
                        "table_name": name,
                        "table_type": table_type,
                    }
                    if cmd.include_schema:
                        arrow = self.table_arrow_schema(ns, name) if table_type == "TABLE" \
                            else self.view_arrow_schema(ns, name)
                        row["table_schema"] = arrow.serialize().to_pybytes()
                    rows.append(row)
        return pa.Table.from_pylist(rows, schema=schema)

    def view_arrow_schema(self, ns: tuple[str, ...], name: str) -> pa.Schema:
        """The view's current schema, as ``table_arrow_schema`` gives a table's."""
        loaded = views.load(self.catalog, ns, name).metadata
        version = next(v for v in loaded.versions if v.version_id == loaded.current_version_id)
        schema = next(s for s in loaded.schemas if s.schema_id == version.schema_id)
        return self._arrow_schema(schema, ns, name)

    def table_arrow_schema(self, ns: tuple[str, ...], name: str) -> pa.Schema:
        """The table's current schema with the ARROW:FLIGHT:SQL:* column metadata."""
        return self._arrow_schema(self.catalog.load_table((*ns, name)).schema(), ns, name)

    def _arrow_schema(self, schema: Any, ns: tuple[str, ...], name: str) -> pa.Schema:
        arrow = schema_to_pyarrow(schema, include_field_ids=False)
        fields = []
        for f, ice in zip(arrow, schema.fields, strict=True):
            typ = small_types(f.type)  # what DuckDB returns for the column
            meta = column_metadata(typ, ".".join(ns), name)
            meta["ARROW:FLIGHT:SQL:TYPE_NAME"] = sql_type_name(ice.field_type)
            fields.append(pa.field(f.name, typ, nullable=not ice.required, metadata=meta))
        return pa.schema(fields)

    def table_types(self) -> pa.Table:
        return pa.Table.from_pylist([{"table_type": t} for t in TABLE_TYPES], schema=TABLE_TYPES_SCHEMA)

    def xdbc_type_info(self, cmd: p.CommandGetXdbcTypeInfo) -> pa.Table:
        rows = [r for r in _XDBC_TYPES if cmd.data_type is None or r["data_type"] == cmd.data_type]
        return pa.Table.from_pylist(rows, schema=XDBC_TYPE_INFO_SCHEMA)


_SQL_TYPE_NAMES = {
    "boolean": "BOOLEAN",
    "int": "INTEGER",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "time": "TIME",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMP WITH TIME ZONE",
    "timestamp_ns": "TIMESTAMP_NS",
    "timestamptz_ns": "TIMESTAMP WITH TIME ZONE",
    "string": "VARCHAR",
    "uuid": "UUID",
    "binary": "BLOB",
}


def sql_type_name(iceberg_type: Any) -> str:
    """The SQL name of an Iceberg type as DuckDB spells it (``typeof``): nested types spelled out
    recursively with their fields' own case, never Iceberg's ``struct<1: a: optional int>``."""
    if isinstance(iceberg_type, ListType):
        return f"{sql_type_name(iceberg_type.element_type)}[]"
    if isinstance(iceberg_type, MapType):
        return f"MAP({sql_type_name(iceberg_type.key_type)}, {sql_type_name(iceberg_type.value_type)})"
    if isinstance(iceberg_type, StructType):
        fields = ", ".join(f"{_field_name(f.name)} {sql_type_name(f.field_type)}" for f in iceberg_type.fields)
        return f"STRUCT({fields})"
    text = str(iceberg_type)
    if text.startswith("decimal"):
        return text.upper()
    if text.startswith("fixed"):
        return "BLOB"
    return _SQL_TYPE_NAMES.get(text, text.upper())


def _field_name(name: str) -> str:
    return name if name.isidentifier() and name.isascii() else '"' + name.replace('"', '""') + '"'


def column_metadata(typ: pa.DataType, db_schema: str | None, table: str | None, read_only: bool = False
                    ) -> dict[str, str]:
    """The ``ARROW:FLIGHT:SQL:*`` keys of a column that comes from a table column.

    The schema name goes under both spellings: ``SCHEMA_NAME`` is what the client libraries
    read (arrow-go ``SchemaNameKey``, Arrow C++ ``ColumnMetadata::kSchemaName``, Java's
    ``FlightSqlColumnMetadata`` behind the JDBC driver), ``DB_SCHEMA_NAME`` what the protocol
    text once named.
    """
    meta = {
        "ARROW:FLIGHT:SQL:CATALOG_NAME": CATALOG_NAME,
        "ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": "0",
        "ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE": "1" if pa.types.is_string(typ) else "0",
        "ARROW:FLIGHT:SQL:IS_READ_ONLY": "1" if read_only else "0",
        "ARROW:FLIGHT:SQL:IS_SEARCHABLE": "1",
    }
    if db_schema is not None:
        meta["ARROW:FLIGHT:SQL:SCHEMA_NAME"] = db_schema
        meta["ARROW:FLIGHT:SQL:DB_SCHEMA_NAME"] = db_schema
    if table is not None:
        meta["ARROW:FLIGHT:SQL:TABLE_NAME"] = table
    if pa.types.is_decimal(typ):
        meta["ARROW:FLIGHT:SQL:PRECISION"] = str(typ.precision)
        meta["ARROW:FLIGHT:SQL:SCALE"] = str(typ.scale)
    return meta


def annotate(schema: pa.Schema, origins: list[ColumnOrigin | None]) -> pa.Schema:
    """``schema`` (a query result) with column metadata on each field that comes straight from
    a table column; unchanged when the origins do not line up with it."""
    if not origins or len(origins) != len(schema) or not any(origins):
        return schema
    fields = []
    for f, origin in zip(schema, origins, strict=True):
        if origin is None:
            fields.append(f)
            continue
        meta = column_metadata(f.type, ".".join(origin.namespace), origin.table, origin.read_only)
        meta["ARROW:FLIGHT:SQL:TYPE_NAME"] = sql_type_name(origin.field.field_type)
        typ = origin.field.field_type
        if isinstance(typ, DecimalType):
            meta["ARROW:FLIGHT:SQL:PRECISION"], meta["ARROW:FLIGHT:SQL:SCALE"] = str(typ.precision), str(typ.scale)
        fields.append(pa.field(f.name, f.type, nullable=f.nullable and origin.nullable, metadata=meta))
    return pa.schema(fields, metadata=schema.metadata)


def _xdbc(
    name: str,
    data_type: int,
    size: int | None,
    prefix: str | None = None,
    suffix: str | None = None,
    params: list[str] | None = None,
    case: bool = False,
    unsigned: bool | None = False,
    sql_type: int | None = None,
    subcode: int | None = None,
    radix: int | None = None,
) -> dict[str, Any]:
    return {
        "type_name": name,
        "data_type": data_type,
        "column_size": size,
        "literal_prefix": prefix,
        "literal_suffix": suffix,
        "create_params": params,
        "nullable": 1,
        "case_sensitive": case,
        "searchable": 3,
        "unsigned_attribute": unsigned,
        "fixed_prec_scale": False,
        "auto_increment": False,
        "local_type_name": name,
        "minimum_scale": None,
        "maximum_scale": None,
        "sql_data_type": sql_type if sql_type is not None else data_type,
        "datetime_subcode": subcode,
        "num_prec_radix": radix,
        "interval_precision": None,
    }


# XdbcDataType codes (FlightSql.proto): the JDBC/ODBC type numbers.
_XDBC_TYPES = [
    _xdbc("BIGINT", -5, 19, radix=10),
    _xdbc("BLOB", -3, 2147483647, "'", "'::BLOB", unsigned=None),
    _xdbc("VARCHAR", 12, 2147483647, "'", "'", case=True, unsigned=None),
    _xdbc("BOOLEAN", 16, 1, unsigned=None),
    _xdbc("INTEGER", 4, 10, radix=10),
    _xdbc("DECIMAL", 3, 38, params=["precision", "scale"], radix=10),
    _xdbc("FLOAT", 6, 24, radix=2),
    _xdbc("DOUBLE", 8, 53, radix=2),
    _xdbc("DATE", 91, 10, "DATE '", "'", unsigned=None, sql_type=9, subcode=1),
    _xdbc("TIME", 92, 15, "TIME '", "'", unsigned=None, sql_type=9, subcode=2),
    _xdbc("TIMESTAMP", 93, 26, "TIMESTAMP '", "'", unsigned=None, sql_type=9, subcode=3),
    # XdbcDatetimeSubcode 5: TIMESTAMP_WITH_TIMEZONE.
    _xdbc("TIMESTAMP WITH TIME ZONE", 93, 32, "TIMESTAMPTZ '", "'", unsigned=None, sql_type=9, subcode=5),
    # Types XdbcDataType has no code for (XDBC_UNKNOWN_TYPE): Iceberg's uuid and nested types.
    _xdbc("UUID", 0, 36, "'", "'::UUID", unsigned=None),
    _xdbc("LIST", 0, None, unsigned=None, params=["element type"]),
    _xdbc("MAP", 0, None, unsigned=None, params=["key type", "value type"]),
    _xdbc("STRUCT", 0, None, unsigned=None, params=["field names and types"]),
]
