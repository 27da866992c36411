"""The catalog sink: an ingest runner's commits, through the server's own append path.

Rows go through ``catalog.append.Appender`` exactly as a DoPut's do (schema policy, group
commit's table slot, fsync before the catalog write, idempotency key in the same RocksDB
batch); the connector's checkpoint rides along as snapshot summary properties and the lineage
(the source as input dataset, the job name) as the commit record's ``extra``. So an ingest
commit is an ordinary commit: on the feed, in lineage, with the principal that set it up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from catalog.context import commit_context
from catalog.ingest_checkpoints import IngestCommit, StoredCheckpoint, encode_positions, table_checkpoint
from catalog.keyed_changes import commit_keyed
from icefloe.ingest.runner import CommitOutcome

if TYPE_CHECKING:
    from catalog.append import Appender


class CatalogSink:
    """Commits into table ``table`` (``ns.t``) of the appender's catalog.

    Args:
        appender: The server's (or an embedded lake's) appender.
        table: The target, ``ns.t``.
        principal: Recorded on every commit (who added the connector).
        schema_policy: This connector's own schema policy (None: the table's).
    """

    def __init__(self, appender: Appender, table: str, principal: str | None = None,
                 schema_policy: str | None = None) -> None:
        self.appender = appender
        self.table = table
        self.identifier = tuple(table.split("."))
        self.principal = principal
        self.schema_policy = schema_policy

    def checkpoint(self, name: str) -> StoredCheckpoint:
        metadata = self.appender.catalog.load_table(self.identifier).metadata
        return table_checkpoint(metadata, name)

    def commit(self, rows: pa.Table, commit: IngestCommit) -> CommitOutcome:
        table_uuid = str(self.appender.catalog.load_table(self.identifier).metadata.table_uuid)
        with commit_context(principal=self.principal):
            result = self.appender.append_stream(
                self.identifier, rows.schema, rows.to_batches(), idempotency_key=commit.idempotency_key(table_uuid),
                snapshot_properties=commit.snapshot_properties(), extra=commit.commit_extra(),
                schema_policy=self.schema_policy, source_position=encode_positions(commit.positions),
            )
        return CommitOutcome(result.commit_seq, result.rows, result.duplicate)

    def commit_changes(self, upserts: pa.Table, removed: pa.Table, key: tuple[str, ...],
                       commit: IngestCommit, truncate: bool = False) -> CommitOutcome:
        """Row-level changes by key (``catalog.keyed_changes``), the checkpoint in the same commit;
        ``truncate``: every row of the table goes first."""
        table_uuid = str(self.appender.catalog.load_table(self.identifier).metadata.table_uuid)
        with commit_context(principal=self.principal):
            result = commit_keyed(
                self.appender, self.identifier, upserts, removed, list(key),
                idempotency_key=commit.idempotency_key(table_uuid), snapshot_properties=commit.snapshot_properties(),
                extra=commit.commit_extra(), schema_policy=self.schema_policy, truncate=truncate,
            )
        return CommitOutcome(result.commit_seq, result.rows, result.duplicate)
