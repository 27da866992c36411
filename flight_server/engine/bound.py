"""What a query returns, remembered: its result types without asking DuckDB again.

DuckDB's binder can say what a query returns only once its tables are registered and named:
a source per part, a schema, a view, then the bind and a ``DROP VIEW``, five to ten statements
of 0.3-1 ms each on this machine. What it answers depends only on the SQL text, the default
schema and the pinned tables' columns, and a table's uuid with a schema id names those columns
for good (Iceberg never changes a schema id's fields). So the answer is kept under exactly
those: a dashboard's repeated GetFlightInfo, and the DoGet of a plain scan whose GetFlightInfo
bound it, run no DuckDB statement for it.

Only queries without parameter values and over data tables only (no metadata tables, whose
sources are built per snapshot) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from catalog.lru import LockedLRU
from flight_server.engine.table_reads import TableReads
from flight_server.engine.tables import PinnedTable

_SIZE = 2048
_MAX_SQL_CHARS = 16384


@dataclass(frozen=True)
class Bound:
    """A bound query's result: its Arrow schema, its parameters' and DuckDB's type names."""

    schema: pa.Schema
    parameters: pa.Schema
    type_names: tuple[str, ...]


class BoundSchemas:
    """An LRU of ``Bound`` results keyed by what binding depends on (see the module docstring)."""

    def __init__(self, tables: TableReads) -> None:
        self._tables = tables
        self._bound: LockedLRU[tuple[Any, ...], Bound] = LockedLRU(_SIZE)

    def key(self, sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable]) -> tuple[Any, ...] | None:
        """The key of a query's binding, or None when it is not kept (or a table is gone: the
        caller's own path reports that)."""
        if len(sql) > _MAX_SQL_CHARS or any(pin.kind != "data" for pin in pins):
            return None
        tables = []
        for pin in pins:
            try:
                table = self._tables.load(pin.namespace, pin.name)
            except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                return None
            schema_id = pin.schema_id if pin.schema_id in table.schemas() else table.metadata.current_schema_id
            tables.append((pin.namespace, pin.name, pin.view_name, str(table.metadata.table_uuid), schema_id))
        return (sql, default_schema, tuple(tables))

    def get(self, key: tuple[Any, ...] | None) -> Bound | None:
        return None if key is None else self._bound.get(key)

    def put(self, key: tuple[Any, ...] | None, bound: Bound) -> None:
        if key is not None:
            self._bound.put(key, bound)
