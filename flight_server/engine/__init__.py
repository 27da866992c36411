"""The SQL engine (DuckDB) behind a small interface returning ``pyarrow.RecordBatchReader``s."""

from flight_server.engine.engine import CATALOG_NAME, Engine, Kind, PinnedTable, split_namespace

__all__ = ["CATALOG_NAME", "Engine", "Kind", "PinnedTable", "split_namespace"]
