"""Two-phase appends: stage files now, commit several stagings as one snapshot later.

A distributed writer (a Spark job's tasks) stages its rows from many places, then one
driver commits all of them at once, exactly once, or aborts them:

- ``Appender.stage_stream`` writes and fsyncs the data files plus a small Avro manifest
  listing them (Iceberg's own encoding of ``DataFile``s, column stats and partition values
  included), then records the staging in RocksDB (``stg/`` key, fsync'd). Nothing is
  committed: no snapshot, no commit-log record. It answers a ``StagedAppend``; the server
  seals it into the client's staging token, which therefore carries no server path.
- ``Appender.commit_staged`` lands every staging's files as ONE snapshot in ONE catalog
  commit. In the same RocksDB batch each staging record turns ``committed`` (with the commit
  seq and the idempotency key), so a staging can be committed once only, and a retry with the
  same key answers the first result.
- ``Appender.abort_staged`` deletes the staging records, then their files.

Staged files that are never committed are orphans after the grace period: orphan removal
(``maintenance.remove_orphans``), holding the table's commit slot like a commit does, drops
the records of stagings older than its cutoff (``expire_before``) and treats the files of the
younger ones as referenced. A commit checks its records in that same slot, so it never lands
files that orphan removal is deleting.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestFile, write_manifest
from pyiceberg.table import Table
from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

from catalog import keys
from catalog.durable_io import fsync_all, local_path
from catalog.store import RocksStore
from catalog.writer import delete_files

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

logger = logging.getLogger("icefloe.catalog.staging")

MAX_JOB_LENGTH = 256
# Committed staging records answer "already committed" for this long (as idempotency keys).
COMMITTED_RETENTION_S = 7 * 24 * 3600.0


class StagingError(ValueError):
    """A staging cannot be committed or aborted (message written for the client)."""


class StagedNotFound(StagingError):
    """The staging was aborted, or orphan removal took its files after the grace period."""


class StagedAlreadyCommitted(StagingError):
    """The staging is part of a commit already (under another idempotency key, or none)."""


class StagedIncompatible(StagingError):
    """The table changed since staging so that the staged files no longer fit it."""


@dataclass(frozen=True)
class StagedAppend:
    """What one staged DoPut wrote: sealed into the client's staging token by the server."""

    id: str
    table: str
    table_uuid: str
    job: str
    rows: int
    files: int
    bytes: int
    schema_id: int
    spec_id: int
    principal: str | None
    staged_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: Any) -> StagedAppend:
        """Raises ValueError when ``body`` is not a staged append's JSON."""
        if not isinstance(body, dict) or set(body) != set(cls.__dataclass_fields__):
            raise ValueError("not a staged append")
        kinds = {"rows": int, "files": int, "bytes": int, "schema_id": int, "spec_id": int, "staged_at": float}
        for name, kind in kinds.items():
            if not isinstance(body[name], (int, float) if kind is float else int) or isinstance(body[name], bool):
                raise ValueError("not a staged append")
        if not all(isinstance(body[n], str) for n in ("id", "table", "table_uuid", "job")):
            raise ValueError("not a staged append")
        if body["principal"] is not None and not isinstance(body["principal"], str):
            raise ValueError("not a staged append")
        return cls(**body)


def check_job(job: str) -> str:
    """Validate a job id (the ``x-icefloe-stage`` header); raises ValueError for the client."""
    if not job or len(job) > MAX_JOB_LENGTH:
        raise ValueError(f"the staging job id must be 1 to {MAX_JOB_LENGTH} characters long")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in job):
        raise ValueError("the staging job id must not contain control characters")
    return job


def _record_key(namespace: tuple[str, ...], table: str, staging_id: str) -> bytes:
    return _table_prefix(namespace, table) + staging_id.encode("ascii")


def _table_prefix(namespace: tuple[str, ...], table: str) -> bytes:
    return keys.STAGED + keys.encode_namespace(namespace) + b"\x00" + table.encode("utf-8") + b"\x00"


class StagingStore:
    """The ``stg/`` records: one per staging, ``staged`` until committed (or removed)."""

    def __init__(self, store: RocksStore) -> None:
        self._store = store

    def get(self, namespace: tuple[str, ...], table: str, staging_id: str) -> dict[str, Any] | None:
        raw = self._store.get(_record_key(namespace, table, staging_id))
        return None if raw is None else dict(json.loads(raw))

    def put_staged(self, namespace: tuple[str, ...], table: str, staged: StagedAppend, manifest: str,
                   data_files: list[str]) -> None:
        """Record a staging durably (its files are already fsync'd)."""
        value = {"state": "staged", "append": staged.to_json(), "manifest": manifest, "data_files": data_files}
        self._store.write({_record_key(namespace, table, staged.id): _encode(value)})

    def committed_writes(
        self, namespace: tuple[str, ...], table: str, records: dict[str, dict[str, Any]],
        key: str | None, commit_seq: int, snapshot_id: int | None,
    ) -> dict[bytes, bytes]:
        """The record updates to land in the commit batch that commits ``records``."""
        now = time.time()
        return {
            _record_key(namespace, table, staging_id): _encode({
                "state": "committed", "append": record["append"], "idempotency_key": key,
                "commit_seq": commit_seq, "snapshot_id": snapshot_id, "stored_at": now,
            })
            for staging_id, record in records.items()
        }

    def of_job(self, namespace: tuple[str, ...], table: str, job: str) -> list[tuple[StagedAppend, bool]]:
        """The table's stagings made under job id ``job`` that are still recorded, each with
        whether it is committed, oldest first (commit / abort by job id: SQL clients)."""
        found = [
            (StagedAppend.from_json(record["append"]), record["state"] == "committed")
            for _, raw in self._store.scan(_table_prefix(namespace, table))
            if (record := json.loads(raw))["append"]["job"] == job
        ]
        return sorted(found, key=lambda item: (item[0].staged_at, item[0].id))

    def delete(self, namespace: tuple[str, ...], table: str, staging_ids: list[str]) -> None:
        if staging_ids:
            self._store.write({}, tuple(_record_key(namespace, table, s) for s in staging_ids))

    def expire_before(self, namespace: tuple[str, ...], table: str, cutoff: float) -> set[str]:
        """Drop the table's uncommitted stagings older than ``cutoff`` (orphan removal, in the
        table's commit slot); return the paths of the younger ones' files, still referenced."""
        live: set[str] = set()
        expired: list[bytes] = []
        for key, raw in self._store.scan(_table_prefix(namespace, table)):
            record = json.loads(raw)
            if record.get("state") != "staged":
                continue
            if float(record["append"]["staged_at"]) < cutoff:
                expired.append(key)
            else:
                live.update([record["manifest"], *record["data_files"]])
        if expired:
            self._store.write({}, tuple(expired))
            logger.info("dropped %d stagings of %s past the orphan grace period", len(expired), table)
        return live

    def expire_committed(self, now: float | None = None, retention_s: float = COMMITTED_RETENTION_S) -> int:
        """Forget committed stagings older than ``retention_s``; return how many."""
        cutoff = (now if now is not None else time.time()) - retention_s
        stale = [
            key for key, raw in self._store.scan(keys.STAGED)
            if (record := json.loads(raw)).get("state") == "committed" and float(record["stored_at"]) < cutoff
        ]
        if stale:
            self._store.write({}, tuple(stale))
        return len(stale)


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


# -- files --------------------------------------------------------------------------------


def write_staging_manifest(table: Table, data_files: list[DataFile], spec_id: int) -> str:
    """Write ``data_files`` into an fsync'd Avro manifest under the table's metadata folder
    (never referenced by a snapshot: it only carries the files to the commit); return its path."""
    metadata = table.metadata
    path = f"{metadata.location.rstrip('/')}/metadata/staged-{uuid.uuid4()}.avro"
    spec = metadata.specs()[spec_id]
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

    writer = write_manifest(
        format_version=metadata.format_version,
        spec=spec,
        schema=metadata.schema(),
        output_file=table.io.new_output(path),
        snapshot_id=0,  # placeholder: a staged manifest belongs to no snapshot
        avro_compression="null",
    )
    with writer:
        for data_file in data_files:
            writer.add_entry(ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=0, data_file=data_file,
            ))
    local = local_path(path)
    if local:
        fsync_all([local])
    return path


def read_staging_manifest(table: Table, path: str, spec_id: int) -> list[DataFile]:
    """The ``DataFile``s a staging manifest lists.

    Raises:
        StagedNotFound: The manifest is gone (orphan removal, a crash mid-abort).
    """
    manifest = ManifestFile.from_args(
        manifest_path=path, manifest_length=0, partition_spec_id=spec_id, content=ManifestContent.DATA,
        sequence_number=0, min_sequence_number=0, added_snapshot_id=0,
    )
    try:
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    except FileNotFoundError:
        raise StagedNotFound("the staged files are gone (aborted, or removed after the orphan grace period)") from None
    files = [entry.data_file for entry in entries]
    for data_file in files:
        if data_file.content != DataFileContent.DATA:
            raise StagedIncompatible("a staging manifest lists a file that is not a data file")
    return files


def remove_staged_files(table: Table, record: dict[str, Any]) -> None:
    """Delete a staging's data files and manifest (best effort; orphan removal takes the rest)."""
    delete_files(table.io, [*record["data_files"], record["manifest"]])


# -- compatibility --------------------------------------------------------------------------


_PROMOTIONS = {(IntegerType, LongType), (FloatType, DoubleType)}


def _promotable(old: IcebergType, new: IcebergType) -> bool:
    if old == new:
        return True
    if (type(old), type(new)) in _PROMOTIONS:
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and new.precision >= old.precision
    return False


def check_fits(table: Table, staged: StagedAppend) -> None:
    """Refuse a staging whose files no longer fit the table.

    Files are read by field id, so a later schema that added optional columns, dropped some or
    widened types still reads them; a new required column, an incompatible type change or a
    new partition spec does not.

    Raises:
        StagedIncompatible: With what changed.
    """
    metadata = table.metadata
    if staged.spec_id != metadata.default_spec_id:
        raise StagedIncompatible(
            f"the partition spec of {staged.table} changed after the files were staged; stage them again"
        )
    if staged.schema_id == metadata.current_schema_id:
        return
    schemas: dict[int, Schema] = {s.schema_id: s for s in metadata.schemas}
    old = schemas.get(staged.schema_id)
    if old is None:
        raise StagedIncompatible(f"the schema the files of {staged.table} were staged with no longer exists")
    current = metadata.schema()
    for field in current.fields:
        try:
            before = old.find_field(field.field_id)
        except ValueError:
            if field.required:
                raise StagedIncompatible(
                    f"{staged.table} gained the required column {field.name!r} after the files were staged"
                ) from None
            continue
        if not _promotable(before.field_type, field.field_type):
            raise StagedIncompatible(
                f"column {field.name!r} of {staged.table} changed type from {before.field_type} to "
                f"{field.field_type} after the files were staged"
            )
