"""OpenLineage export of icefloe's commits (no Flight or DuckDB imports here).

``LineageExporter`` keeps a durable outbox in the catalog's RocksDB and drains it in a
background thread through the openlineage-python client; ``events`` builds the events;
``transport`` reads the client's configuration; ``redact`` scrubs secrets.
"""

from catalog.lineage.events import (
    LineageSettings,
    build_commit_events,
    build_failure_events,
    commit_run_id,
)
from catalog.lineage.exporter import LineageExporter
from catalog.lineage.transport import ResolvedClient, resolve_client

__all__ = [
    "LineageExporter",
    "LineageSettings",
    "ResolvedClient",
    "build_commit_events",
    "build_failure_events",
    "commit_run_id",
    "resolve_client",
]
