"""The SQL engine (DuckDB) behind a small interface returning ``pyarrow.RecordBatchReader``s."""

from flight_server.engine.engine import Engine
from flight_server.engine.planner import Kind
from flight_server.engine.slots import CATALOG_NAME
from flight_server.engine.sql_text import split_namespace
from flight_server.engine.tables import PinnedTable

__all__ = ["CATALOG_NAME", "Engine", "Kind", "PinnedTable", "split_namespace"]
