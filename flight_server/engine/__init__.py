"""The SQL engine (DuckDB) behind a small interface returning ``pyarrow.RecordBatchReader``s."""

from flight_server.engine.engine import Engine, Kind, PinnedTable, split_namespace
from flight_server.engine.slots import CATALOG_NAME

__all__ = ["CATALOG_NAME", "Engine", "Kind", "PinnedTable", "split_namespace"]
