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

from catalog import keys
from catalog.context import commit_context
from catalog.ingest_checkpoints import (
    IngestCommit,
    StoredCheckpoint,
    encode_idle,
    encode_positions,
    idle_positions,
    table_checkpoint,
)
from catalog.keyed_changes import commit_keyed
from catalog.keyed_tables import TableChanges, commit_keyed_tables
from icefloe.ingest.runner import CommitOutcome, TableChange

if TYPE_CHECKING:
    from catalog.append import Appender


class CatalogSink:
    """Commits into table ``table`` (``ns.t``) of the appender's catalog, or into several.

    Args:
        appender: The server's (or an embedded lake's) appender.
        table: The target, ``ns.t`` (with ``tables``: the first of them).
        principal: Recorded on every commit (who added the connector).
        schema_policy: This connector's own schema policy (None: the table's).
        tables: Every target of a connector that feeds several tables (``commit_tables``); the
            checkpoint rides in each table a commit changes, so the connector's checkpoint is
            the one of the highest step among them.
    """

    def __init__(self, appender: Appender, table: str, principal: str | None = None,
                 schema_policy: str | None = None, tables: tuple[str, ...] = ()) -> None:
        self.appender = appender
        self.table = table
        self.identifier = tuple(table.split("."))
        self.tables = tables or (table,)
        self.principal = principal
        self.schema_policy = schema_policy

    def checkpoint(self, name: str) -> StoredCheckpoint:
        metadata = {t: self.appender.catalog.load_table(tuple(t.split("."))).metadata for t in self.tables}
        best = max((table_checkpoint(m, name) for m in metadata.values()), key=lambda c: c.step)
        raw = self.appender.catalog.store.get(keys.INGEST_IDLE + name.encode())
        if raw is None:
            return best
        # Positions the source moved on by without data for us (stored by ``note_idle``).
        idle = idle_positions(raw, best.step, {t: str(m.table_uuid) for t, m in metadata.items()})
        return StoredCheckpoint(best.step, idle, best.snapshot_id) if idle is not None else best

    def note_idle(self, name: str, step: int, positions: dict[str, str]) -> None:
        """Durably record that checkpoint ``step`` extends to ``positions`` (the source data
        in between held nothing for the targets), before the source is told it may let go."""
        self.appender.catalog.store.write({keys.INGEST_IDLE + name.encode(): encode_idle(step, self._uuids(),
                                                                                         positions)})

    def _uuids(self) -> dict[str, str]:
        return {t: str(self.appender.catalog.load_table(tuple(t.split("."))).metadata.table_uuid)
                for t in self.tables}

    def commit_tables(self, parts: list[TableChange], commit: IngestCommit,
                      sources: dict[str, tuple[str, str]]) -> CommitOutcome:
        """Every table's changes and the checkpoint in ONE catalog commit
        (``catalog.keyed_tables``); ``sources``: each target's lineage input dataset."""
        changes = []
        for part in parts:
            identifier = tuple(part.table.split("."))
            table_uuid = str(self.appender.catalog.load_table(identifier).metadata.table_uuid)
            extra = commit.commit_extra()
            if part.table in sources:
                extra["input_datasets"] = [{"namespace": sources[part.table][0], "name": sources[part.table][1]}]
            extra["ingest"] = {**extra["ingest"], "rows": part.upserts.num_rows,
                               "deleted_keys": part.removed.num_rows, **({"truncated": True} if part.truncate else {})}
            changes.append(TableChanges(identifier, part.upserts, part.removed, list(part.key), part.truncate,
                                        commit.idempotency_key(table_uuid), commit.snapshot_properties(), extra))
        with commit_context(principal=self.principal):
            results = commit_keyed_tables(self.appender, changes, self.schema_policy)
        return CommitOutcome(max(r.commit_seq for r in results), sum(r.rows for r in results),
                             results[0].duplicate)

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
