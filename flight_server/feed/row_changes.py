"""The rows one commit deleted and inserted, whatever it wrote: data files removed and added
(copy-on-write) or delete files (merge-on-read: position deletes, equality deletes, deletion
vectors) — as a reader sees the table before and after it.

Before = the commit's parent snapshot, after = its last snapshot, each planned with its
deletes (``catalog.deletes``). A data file live before and gone after contributes its rows
visible before; a data file whose deletes changed contributes the rows visible before that
the new deletes remove (a position mask and equality semi-joins per batch, comparing the two
masks); a data file new after contributes its rows visible after. Carry-overs cancel in
``changelog.net_changes`` as for copy-on-write commits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from catalog.delete_reads import bind, file_batches
from catalog.deletes import DeleteSets, FileDeletes, PlannedFile, plan_files
from flight_server.engine.iceberg_source import empty_table
from flight_server.feed.rows import RowsUnavailable

_SETS = DeleteSets()


def commit_row_changes(
    metadata: TableMetadata, io: FileIO, before_id: int | None, after_id: int, schema: Schema
) -> tuple[pa.Table, pa.Table]:
    """(rows deleted, rows inserted) between snapshots ``before_id`` and ``after_id``, with
    ``schema``'s columns (matched by field id).

    Raises:
        RowsUnavailable: A snapshot of the commit was expired.
    """
    for snapshot_id in (before_id, after_id):
        if snapshot_id is not None and metadata.snapshot_by_id(snapshot_id) is None:
            raise RowsUnavailable("the commit's snapshots were expired")
    before = _planned(metadata, io, before_id)
    after = _planned(metadata, io, after_id)
    target = schema_to_pyarrow(schema, include_field_ids=False)
    deleted: list[pa.Table] = []
    inserted: list[pa.Table] = []
    for path, old in before.items():
        new = after.get(path)
        if new is None:
            deleted.append(_read(io, old.data_file, schema, target, old.deletes, None))
        elif new.deletes.key != old.deletes.key:
            deleted.append(_read(io, old.data_file, schema, target, old.deletes, new.deletes))
    for path, new in after.items():
        if path not in before:
            inserted.append(_read(io, new.data_file, schema, target, new.deletes, None))
    return _concat(deleted, target), _concat(inserted, target)


def _planned(metadata: TableMetadata, io: FileIO, snapshot_id: int | None) -> dict[str, PlannedFile]:
    if snapshot_id is None:
        return {}
    return {p.data_file.file_path: p for p in plan_files(metadata, io, snapshot_id)}


def _concat(tables: list[pa.Table], target: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else empty_table(target)


def _read(
    io: FileIO, data_file: DataFile, schema: Schema, target: pa.Schema, keep: FileDeletes, minus: FileDeletes | None
) -> pa.Table:
    """Rows of ``data_file`` that ``keep`` leaves; with ``minus``, only those ``minus`` removes."""
    names = {f.field_id: f.name for f in schema.fields}
    kept = bind(io, _SETS, keep, data_file.file_path)
    removing = bind(io, _SETS, minus, data_file.file_path) if minus is not None else None
    out = []
    position = 0
    for batch in file_batches(io, data_file, schema, target):
        mask = kept.keep(batch, position, names)
        visible = np.ones(batch.num_rows, dtype=bool) if mask is None else mask
        if removing is not None:
            after = removing.keep(batch, position, names)
            visible = visible & ~(np.ones(batch.num_rows, dtype=bool) if after is None else after)
        position += batch.num_rows
        if visible.any():
            out.append(batch.filter(pa.array(visible)))
    return pa.Table.from_batches(out, schema=target)


def snapshot_has_deletes(metadata: TableMetadata, snapshot_id: int | None) -> Any:
    """Whether the snapshot's summary lists any delete file (merge-on-read tables)."""
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    summary = snapshot.summary if snapshot is not None else None
    return summary is not None and int(summary.get("total-delete-files", "0") or 0) > 0
