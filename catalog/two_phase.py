"""Two-phase appends over the group committer: stage, then commit many stagings at once.

See ``staging`` for the records and files; this module drives them through the table's
commit slot (``append.TableCommitter``), so a commit of stagings is an ordinary icefloe
append commit: one snapshot, one catalog commit, one feed event, one lineage run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog.append import Appender, AppendResult
from catalog.commit_log import CommitRecord
from catalog.commit_requests import CommitRequest
from catalog.context import current_commit_context
from catalog.durable_io import fsync_all, local_paths
from catalog.idempotency import check_key
from catalog.maintenance_worker import live_data_files
from catalog.quarantine import checked_without_quarantine
from catalog.schema_policy import EVOLVE, STRICT, SchemaMismatchError, plan, policy_of, renamed
from catalog.staging import (
    StagedAlreadyCommitted,
    StagedAppend,
    StagedNotFound,
    StagingError,
    check_fits,
    check_job,
    read_staging_manifest,
    remove_staged_files,
    write_staging_manifest,
)
from catalog.v3 import refuse_v3_write
from catalog.writer import DataFileWriter, delete_files

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

MAX_STAGINGS_PER_COMMIT = 10_000


class TwoPhaseAppends:
    """Stage, commit and abort appends of one warehouse (shares the ``Appender``'s slots)."""

    def __init__(self, appender: Appender) -> None:
        self._appender = appender
        self._catalog = appender.catalog
        self.records = appender.staging

    def stage_stream(
        self, identifier: tuple[str, ...], schema: pa.Schema, batches: Iterable[pa.RecordBatch], job: str,
        schema_policy: str | None = None,
    ) -> StagedAppend:
        """Write the stream into fsync'd files and record them as staged; commit nothing.

        Args:
            identifier: The table (it must exist).
            schema: The stream's schema; it must fit the table without changing it.
            batches: The rows; if iterating raises, every file written is deleted.
            job: The writer's job id (a Spark write's UUID), kept with the staging.
            schema_policy: The append's own schema policy (None: the table's).

        Returns:
            The staging, to be sealed into the client's token.

        Raises:
            NoSuchTableError: The table does not exist.
            SchemaMismatchError: The input does not fit, or would change the table's schema.
            ValueError: A malformed job id.
        """
        check_job(job)
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        table = self._catalog.load_table(identifier)
        refuse_v3_write(table.metadata, f"staged append to {'.'.join(identifier)}")
        metadata = table.metadata
        policy = policy_of(table.properties, schema_policy)
        # Planned as evolve (unless strict) so that the refusal below names what would change
        # and says the fix that works for a staged writer; "opt in to evolve" would not.
        policy_plan = plan(table.schema(), schema, STRICT if policy == STRICT else EVOLVE, metadata.format_version)
        if policy_plan.changes_table:
            # Staged files are written against the schema the commit will find; a schema
            # change cannot wait in a staging for its commit. Name what differs and the one
            # fix that works for every staged writer (a Spark job included): change the table.
            changes = [f"adds column {n!r} ({t})" for n, t in policy_plan.add_columns]
            changes += [f"widens column {n!r} to {t}" for n, t in policy_plan.widen_columns]
            raise SchemaMismatchError(
                f"a staged append cannot change the table's schema, and this input {', '.join(changes)}; "
                f"change the table first (ALTER TABLE {'.'.join(identifier)} ...), then write again"
            )
        schema, batches = renamed(schema, batches, policy_plan.renames)
        batches = checked_without_quarantine(self._appender.quality_gate, self._catalog, tuple(identifier),
                                             table.properties, batches, "staged append")
        writer = DataFileWriter(metadata, table.io, schema, policy_plan.required_columns)
        manifest: str | None = None
        self._appender.track_writer(writer)
        try:
            files = Appender.write_all(writer, schema, batches)
            try:
                fsync_all(local_paths(f.file_path for f in files))
                staged = StagedAppend(
                    id=uuid.uuid4().hex,
                    table=".".join(identifier),
                    table_uuid=str(metadata.table_uuid),
                    job=job,
                    rows=writer.rows,
                    files=len(files),
                    bytes=sum(f.file_size_in_bytes for f in files),
                    schema_id=metadata.current_schema_id,
                    spec_id=metadata.default_spec_id,
                    principal=current_commit_context().principal,
                    staged_at=time.time(),
                )
                # In the commit slot: orphan removal, which sweeps in that slot too, sees
                # either no manifest yet or the manifest with its record.
                with self._appender.committer(namespace, name).exclusive():
                    manifest = write_staging_manifest(table, files, staged.spec_id)
                    self.records.put_staged(namespace, name, staged, manifest, [f.file_path for f in files])
            except BaseException:
                delete_files(table.io, [f.file_path for f in files] + ([manifest] if manifest else []))
                raise
        finally:
            self._appender.untrack_writer(writer)
        self._appender.mark_dirty(tuple(identifier), 0)  # so background orphan removal visits it
        return staged

    def commit_staged(
        self, identifier: tuple[str, ...], stagings: list[StagedAppend], idempotency_key: str | None = None,
        overwrite: bool = False,
    ) -> AppendResult:
        """Commit every staging's files as one snapshot in one catalog commit.

        Args:
            identifier: The table the stagings were made for.
            stagings: The stagings (from verified tokens), each at most once; with
                ``overwrite`` there may be none (the table is emptied).
            idempotency_key: A retry with this key answers the first result (``duplicate``).
            overwrite: Replace the table's rows: the one snapshot (operation ``overwrite``)
                removes every data file live when it lands, in the table's commit slot, and
                adds the stagings' files, so no reader sees the table empty or doubled.

        Returns:
            The commit, with the stagings' total row count.

        Raises:
            NoSuchTableError: The table does not exist.
            StagingError: A staging repeats, belongs to another table, or does not match its record.
            StagedNotFound: A staging was aborted or removed after the orphan grace period.
            StagedAlreadyCommitted: A staging was committed already (not under this key).
            StagedIncompatible: The table's schema or spec changed so that the files no longer fit.
            CommitFailedException: The commit kept losing races.
        """
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        if idempotency_key is not None:
            check_key(idempotency_key)
        table = self._catalog.load_table(identifier)
        self._check_belong(table, identifier, stagings, allow_none=overwrite)
        if idempotency_key is not None:
            first = self._appender.idempotency.get(namespace, name, idempotency_key)
            if first is not None:
                return AppendResult(**{**first, "duplicate": True})
        records: dict[str, dict[str, Any]] = {}
        request = CommitRequest(
            [], sum(s.rows for s in stagings), idempotency_key, current_commit_context().principal,
            extra={"staged": {"stagings": len(stagings), "jobs": sorted({s.job for s in stagings}),
                              **({"mode": "overwrite"} if overwrite else {})}},
        )
        # What an overwrite truly changes: every staged row added, every row a reader saw
        # removed (the snapshot summary alone reads as a copy-on-write rewrite). Filled in the
        # commit slot by ``prepare``; the commit-log record takes it (RocksCatalog._land_many).
        counts: dict[str, int] = {"added": request.rows, "deleted": 0}
        if overwrite:
            request.producer = _replace_all
            request.extra["row_counts"] = counts

        def prepare() -> None:  # in the table's commit slot
            current = self._catalog.load_table(identifier)
            files: list[DataFile] = []
            for staged in stagings:
                record = self._record(namespace, name, staged)
                check_fits(current, staged)
                files.extend(read_staging_manifest(current, record["manifest"], staged.spec_id))
                records[staged.id] = record
            request.data_files = files
            if overwrite:
                counts["deleted"] = _visible_rows(current)

        def batch_writes(record: CommitRecord) -> dict[bytes, bytes]:
            return self.records.committed_writes(
                namespace, name, records, idempotency_key, record.seq, record.snapshot_id
            )

        request.prepare, request.batch_writes = prepare, batch_writes
        result = self._appender.committer(namespace, name).submit(request)
        if not result.duplicate:
            # The manifests only carried the files here; the snapshot references the files.
            delete_files(table.io, [r["manifest"] for r in records.values()])
            self._appender.mark_dirty(tuple(identifier), len(request.data_files))
        return result

    def abort_staged(self, identifier: tuple[str, ...], stagings: list[StagedAppend]) -> dict[str, Any]:
        """Forget the stagings and delete their files; aborting twice is not an error.

        Returns:
            ``{"table", "aborted", "files"}``: stagings removed now and their data files.

        Raises:
            NoSuchTableError: The table does not exist.
            StagingError: A staging belongs to another table or does not match its record.
            StagedAlreadyCommitted: A staging was committed: it cannot be aborted.
        """
        namespace, name = tuple(identifier[:-1]), identifier[-1]
        table = self._catalog.load_table(identifier)
        self._check_belong(table, identifier, stagings)
        removed: list[dict[str, Any]] = []
        with self._appender.committer(namespace, name).exclusive():
            for staged in stagings:
                try:
                    removed.append(self._record(namespace, name, staged))
                except StagedNotFound:
                    continue  # aborted or swept already
            self.records.delete(namespace, name, [r["append"]["id"] for r in removed])
        for record in removed:
            remove_staged_files(table, record)
        return {
            "table": ".".join(identifier),
            "aborted": len(removed),
            "files": sum(len(r["data_files"]) for r in removed),
        }

    # -- checks -----------------------------------------------------------------------------

    @staticmethod
    def _check_belong(table: Table, identifier: tuple[str, ...], stagings: list[StagedAppend],
                      allow_none: bool = False) -> None:
        qualified = ".".join(identifier)
        if not stagings and not allow_none:
            raise StagingError("no staging tokens were given")
        if len(stagings) > MAX_STAGINGS_PER_COMMIT:
            raise StagingError(f"at most {MAX_STAGINGS_PER_COMMIT} staging tokens per call")
        if len({s.id for s in stagings}) != len(stagings):
            raise StagingError("a staging token appears more than once")
        uuid_now = str(table.metadata.table_uuid)
        for staged in stagings:
            if staged.table != qualified or staged.table_uuid != uuid_now:
                raise StagingError(f"a staging token was issued for another table than {qualified}")

    def _record(self, namespace: tuple[str, ...], name: str, staged: StagedAppend) -> dict[str, Any]:
        record = self.records.get(namespace, name, staged.id)
        if record is None:
            raise StagedNotFound(
                f"staging {staged.id} of job {staged.job!r} no longer exists: it was aborted, or orphan removal "
                "took its files after the grace period; stage the rows again"
            )
        if record["append"] != staged.to_json():
            raise StagingError("a staging token does not match what was staged")
        if record["state"] == "committed":
            raise StagedAlreadyCommitted(
                f"staging {staged.id} of job {staged.job!r} was committed already (commit seq {record['commit_seq']}"
                + (", under another idempotency key)" if record.get("idempotency_key") else ")")
            )
        return record


def _visible_rows(table: Table) -> int:
    """Rows a reader of ``table``'s current snapshot sees, from its summary (data records minus
    position deletes; equality deletes cannot be counted without reading them)."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    if summary is None:
        return 0
    total = int(summary.get("total-records") or 0) - int(summary.get("total-position-deletes") or 0)
    return max(total, 0)


def _replace_all(update: Any, table: Table) -> Any:
    """An overwrite snapshot of ``table`` (as loaded for this commit attempt) removing every data file.

    Run for each attempt inside the table's commit slot, so the files removed are exactly the
    ones live when the snapshot lands; a concurrent REST commit makes the attempt lose the
    compare-and-swap and the next attempt lists the files again.
    """
    producer = update.overwrite()
    for data_file in live_data_files(table):
        producer.delete_data_file(data_file)
    return producer
