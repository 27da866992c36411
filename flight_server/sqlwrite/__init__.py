"""SQL writes (DDL and DML) on Iceberg tables: one statement, at most one catalog commit."""

from flight_server.sqlwrite.writer import SqlWriter

__all__ = ["SqlWriter"]
