"""Batch reads: one pinned snapshot, one Spark partition per endpoint of a multi-endpoint scan.

The snapshot is pinned when the DataFrame is defined (``DataSource.schema()`` runs once per
``load()``, and Spark pickles the data source instance with what it learnt), so every action on
one DataFrame reads the same snapshot, whatever was committed in between. ``partitions()`` asks
the server for a split scan of ``SELECT <columns> FROM ns.t AT (VERSION => id) [WHERE pushed]``
and makes one partition per endpoint; ``read()`` streams one endpoint and casts each batch to
the exact Arrow schema Spark expects.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from pyspark_icefloe import filters as spark_filters
from pyspark_icefloe.connection import (
    SCAN_MAX_PARTITIONS,
    SCAN_TARGET_BYTES,
    Client,
    IcefloeSparkError,
    Settings,
    int_option,
    option,
    quote_identifier,
    quote_table,
    statement_descriptor,
    table_schema,
)
from pyspark_icefloe.types import conform, target_schema

logger = logging.getLogger("icefloe.spark")

EMPTY = -1  # the pinned "snapshot" of a table that had none: read nothing, every time
DEFAULT_TARGET_BYTES = 16 * 1024 * 1024  # smaller than the server's default: Spark wants parallel tasks
DEFAULT_MAX_PARTITIONS = 64
# As Spark's file sources do (spark.sql.files.openCostInBytes): a split is never made smaller
# than this just to reach the parallelism; below it a task costs more than it reads.
MIN_SPLIT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    """What a batch read reads: a table (with columns and a pin) or a query; plain values."""

    table: str | None
    query: str | None
    columns: tuple[str, ...] | None
    snapshot_id: int | None
    as_of_timestamp: str | None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Source:
        """Read ``table`` | ``query``, ``columns``, ``snapshotId``, ``asOfTimestamp``.

        Raises:
            IcefloeSparkError: Neither or both of table and query, or a malformed option.
        """
        table, query = option(options, "table"), option(options, "query")
        if (table is None) == (query is None):
            raise IcefloeSparkError('give exactly one of the options table ("ns.t") and query (SQL)')
        raw_columns = option(options, "columns")
        columns = tuple(c.strip() for c in raw_columns.split(",") if c.strip()) if raw_columns else None
        snapshot = int_option(options, "snapshotId", None, minimum=-(2**63))
        as_of = option(options, "asOfTimestamp")
        if query is not None and (columns or snapshot is not None or as_of is not None):
            raise IcefloeSparkError("options columns, snapshotId and asOfTimestamp go with table, not query")
        if snapshot is not None and as_of is not None:
            raise IcefloeSparkError("give at most one of snapshotId and asOfTimestamp")
        if table is not None:
            quote_table(table)  # a precise error now rather than at the first read
        return cls(table, query, columns, snapshot, as_of)

    def sql(self, predicates: Sequence[str] = ()) -> str:
        """The statement for this source at its pin, with the pushed predicates."""
        if self.query is not None:
            if predicates:
                return f"SELECT * FROM ({self.query}) AS q WHERE " + " AND ".join(f"({p})" for p in predicates)
            return self.query
        assert self.table is not None
        select = ", ".join(quote_identifier(c) for c in self.columns) if self.columns else "*"
        where = list(predicates)
        reference = quote_table(self.table)
        if self.snapshot_id == EMPTY:
            where.append("FALSE")
        elif self.snapshot_id is not None:
            reference += f" AT (VERSION => {int(self.snapshot_id)})"
        elif self.as_of_timestamp is not None:
            text = self.as_of_timestamp.replace("'", "''")
            reference += f" AT (TIMESTAMP => CAST('{text}' AS TIMESTAMPTZ))"
        sql = f"SELECT {select} FROM {reference}"
        if where:
            sql += " WHERE " + " AND ".join(f"({p})" for p in where)
        return sql

    def total_bytes(self, client: Client) -> int | None:
        """The data file bytes of the pinned snapshot (its summary's ``total-files-size``), or
        None when unknown (a query, an unpinned source, no such summary)."""
        if self.table is None or self.snapshot_id is None or self.snapshot_id == EMPTY:
            return None
        namespace, _, name = self.table.rpartition(".")
        snapshots = quote_identifier(namespace) + "." + quote_identifier(name + "$snapshots")
        sql = f"SELECT summary FROM {snapshots} WHERE snapshot_id = {int(self.snapshot_id)}"
        rows = read_all(client, sql).column("summary").to_pylist()
        total = dict(rows[0] or []).get("total-files-size") if rows else None
        return int(total) if total is not None and str(total).isdigit() else None

    def pinned(self, client: Client) -> Source:
        """This source pinned to the table's current snapshot (unless already pinned).

        Raises:
            pyarrow.flight.FlightError: The server refused (unknown table, permissions).
        """
        if self.table is None or self.snapshot_id is not None or self.as_of_timestamp is not None:
            return self
        table_schema(client, self.table)  # first: a missing table is reported by its own name
        namespace, _, name = self.table.rpartition(".")
        history = quote_identifier(namespace) + "." + quote_identifier(name + "$history")
        sql = f"SELECT snapshot_id FROM {history} ORDER BY made_current_at DESC LIMIT 1"
        rows = read_all(client, sql).column("snapshot_id").to_pylist()
        return Source(self.table, None, self.columns, int(rows[0]) if rows else EMPTY, None)

    def arrow_schema(self, client: Client) -> pa.Schema:
        """The result schema of this source (GetSchema; nothing is planned or read)."""
        return client.retrying(lambda: client.flight.get_schema(statement_descriptor(self.sql()),
                                                                client.options()).schema)


def read_all(client: Client, sql: str) -> pa.Table:
    """A small query's whole result (one or more endpoints)."""
    info = client.flight_info(statement_descriptor(sql))
    batches = [b for e in info.endpoints for b in client.batches(e.ticket.ticket)]
    return pa.Table.from_batches(batches, schema=info.schema)


@dataclass
class EndpointPartition(InputPartition):
    """One endpoint: its signed ticket (and the server to ask, when the endpoint names one)."""

    ticket: bytes
    location: str | None = None


def scan_headers(options: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """The split-scan headers from ``targetPartitionBytes`` and ``maxPartitions``."""
    target = int_option(options, "targetPartitionBytes", DEFAULT_TARGET_BYTES, minimum=1)
    most = int_option(options, "maxPartitions", DEFAULT_MAX_PARTITIONS, minimum=1)
    return [(SCAN_TARGET_BYTES.encode(), str(target).encode()), (SCAN_MAX_PARTITIONS.encode(), str(most).encode())]


def endpoint_partitions(info: object) -> list[EndpointPartition]:
    out = []
    for endpoint in info.endpoints:  # type: ignore[attr-defined]
        locations = [loc.uri.decode() for loc in endpoint.locations]
        out.append(EndpointPartition(endpoint.ticket.ticket, locations[0] if locations else None))
    return out


def read_endpoint(settings: Settings, partition: EndpointPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Stream one endpoint's batches, each cast to ``target``."""
    if partition.location is not None and partition.location != settings.uri:
        settings = Settings(**{**settings.__dict__, "uri": partition.location})
    client = settings.connect()
    try:
        for batch in client.batches(partition.ticket):
            yield conform(batch, target)
    finally:
        client.close()


def pushdown_planning() -> bool:
    """True when Spark asks for this reader to push filters into it.

    pyspark refuses a reader that implements ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is on, and the reader cannot see that setting;
    with it on, Spark plans the read in its filter-pushdown worker, so the call stack says it.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__file__", "")).endswith("data_source_pushdown_filters.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class BatchReader(DataSourceReader):
    """``spark.read.format("icefloe")``: partitions are endpoints of one pinned split scan."""

    def __init__(self, settings: Settings, source: Source, schema: StructType, options: Mapping[str, str]) -> None:
        self.settings = settings
        self.source = source
        self.target = target_schema(schema)
        self.columns = set(schema.fieldNames())
        self.headers = scan_headers(options)
        self.sized = option(options, "targetPartitionBytes") is None
        self.parallelism = int_option(options, "minPartitions", os.cpu_count() or 2, minimum=1) or 1
        self.predicates: list[str] = []

    def _split_headers(self, client: Client) -> list[tuple[bytes, bytes]]:
        """The split headers; without ``targetPartitionBytes``, the target shrinks (not below
        4 MiB) so that the table makes at least ``minPartitions`` partitions (default: this
        machine's cores), as Spark sizes file splits by its default parallelism. A fixed 16 MiB
        made a 16 MiB table one task on a 2-core machine: half of Spark idle."""
        if not self.sized:
            return self.headers
        total = self.source.total_bytes(client)
        if not total:
            return self.headers
        target = min(DEFAULT_TARGET_BYTES, max(MIN_SPLIT_BYTES, total // self.parallelism))
        return [(k, str(target).encode()) if k == SCAN_TARGET_BYTES.encode() else (k, v) for k, v in self.headers]

    def partitions(self) -> Sequence[InputPartition]:
        client = self.settings.connect()
        try:
            sql = self.source.sql(self.predicates)
            logger.debug("icefloe scan: %s", sql)
            info = client.flight_info(statement_descriptor(sql), self._split_headers(client))
        finally:
            client.close()
        return endpoint_partitions(info) or [EndpointPartition(b"", None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EndpointPartition)
        if not partition.ticket:
            return iter(())  # a scan with no endpoints: Spark still wants one partition
        return read_endpoint(self.settings, partition, self.target)


class PushdownBatchReader(BatchReader):
    """The batch reader with ``pushFilters`` (when ``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        """Keep what renders as SQL; hand back the rest for Spark to apply."""
        self.predicates, rest = spark_filters.split(list(filters), self.columns)
        yield from rest
