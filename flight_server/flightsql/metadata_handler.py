"""Flight SQL metadata commands (``CommandGetCatalogs``, ``...DbSchemas``, ``...Tables``,
``...TableTypes``, ``...SqlInfo``, ``...XdbcTypeInfo``, keys): their schema at GetFlightInfo and
their table at DoGet, both from ``flightsql.metadata``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors
from flight_server.engine.iceberg_source import empty_table
from flight_server.flightsql import metadata as md
from flight_server.flightsql import protocol as p
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer

_SCHEMAS: dict[type, pa.Schema] = {
    p.CommandGetSqlInfo: md.SQL_INFO_SCHEMA,
    p.CommandGetXdbcTypeInfo: md.XDBC_TYPE_INFO_SCHEMA,
    p.CommandGetCatalogs: md.CATALOGS_SCHEMA,
    p.CommandGetDbSchemas: md.DB_SCHEMAS_SCHEMA,
    p.CommandGetTableTypes: md.TABLE_TYPES_SCHEMA,
    p.CommandGetPrimaryKeys: md.PRIMARY_KEYS_SCHEMA,
    p.CommandGetExportedKeys: md.FOREIGN_KEYS_SCHEMA,
    p.CommandGetImportedKeys: md.FOREIGN_KEYS_SCHEMA,
    p.CommandGetCrossReference: md.FOREIGN_KEYS_SCHEMA,
}


class MetadataHandler:
    def __init__(self, metadata: md.Metadata, authorizer: Authorizer) -> None:
        self.metadata = metadata
        self.authorizer = authorizer

    def schema(self, context: flight.ServerCallContext, cmd: p.Message) -> pa.Schema:
        """The result schema of a metadata command (what GetFlightInfo accepts, nothing else)."""
        self.authorizer.authorize(context, roles.FLIGHT_COMMANDS["metadata"])
        if isinstance(cmd, p.CommandGetTables):
            return md.TABLES_SCHEMA_WITH_SCHEMA if cmd.include_schema else md.TABLES_SCHEMA
        schema = _SCHEMAS.get(type(cmd))
        if schema is None:
            raise errors.InvalidArgument(f"{type(cmd).__name__} is not valid for GetFlightInfo")
        return schema

    def table(self, context: flight.ServerCallContext, cmd: p.Message) -> pa.Table:
        schema = self.schema(context, cmd)
        if isinstance(cmd, p.CommandGetSqlInfo):
            return md.sql_info_table(cmd)
        if isinstance(cmd, p.CommandGetXdbcTypeInfo):
            return self.metadata.xdbc_type_info(cmd)
        if isinstance(cmd, p.CommandGetCatalogs):
            return self.metadata.catalogs()
        if isinstance(cmd, p.CommandGetDbSchemas):
            return self.metadata.db_schemas(cmd)
        if isinstance(cmd, p.CommandGetTables):
            return self.metadata.tables(cmd)
        if isinstance(cmd, p.CommandGetTableTypes):
            return self.metadata.table_types()
        # Iceberg tables have no primary or foreign keys: empty results with the spec's schema.
        return empty_table(schema)
