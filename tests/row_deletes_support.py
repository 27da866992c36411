"""Hand-written Iceberg delete files committed as a row delta (what Flink or Iceberg's Java
``RowDelta`` commits): equality delete files (any equality field ids) and position delete
files, written with pyarrow (field ids in the Parquet footer) and pyiceberg's manifest writer
marked as a *delete* manifest. pyiceberg has no row-delta API; the snapshot is an ordinary
fast append whose added manifest holds delete files, so the catalog (in-process or REST) sees
exactly what another engine would send."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record

PATH_ID, POS_ID = 2147483546, 2147483545


class _DeleteManifestWriter(ManifestWriterV2):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _RowDelta(_FastAppendFiles):
    """A snapshot adding delete files (in a delete manifest) to the parent's manifests."""

    def new_manifest_writer(self, spec: Any) -> Any:
        return _DeleteManifestWriter(spec, self._transaction.table_metadata.schema(), self.new_manifest_output(),
                                     self._snapshot_id, self._compression)


def _write(table: Any, data: pa.Table) -> tuple[str, int]:
    path = f"{table.location()}/data/{uuid.uuid4()}-deletes.parquet"
    with table.io.new_output(path).create() as stream:
        pq.write_table(data, stream)
    return path, table.io.new_input(path).__len__()


def _delete_file(table: Any, content: DataFileContent, data: pa.Table, equality_ids: list[int] | None,
                 partition: Record | None = None, bounds: dict[int, bytes] | None = None) -> DataFile:
    path, size = _write(table, data)
    delete_file = DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=partition or Record(),
        record_count=data.num_rows, file_size_in_bytes=size, equality_ids=equality_ids,
        lower_bounds=bounds, upper_bounds=bounds,
    )
    delete_file.spec_id = table.spec().spec_id
    return delete_file


def equality_delete(table: Any, keys: dict[str, list[Any]], partition: Record | None = None) -> None:
    """Commit an equality delete file: a row is deleted where its values of the named columns
    (current names; matched by field id) equal one of ``keys``' rows, NULL equal to NULL."""
    schema = table.schema()
    fields, ids = [], []
    for name in keys:
        field = schema.find_field(name)
        arrow = schema.as_arrow().field(name)
        field_id = {b"PARQUET:field_id": str(field.field_id).encode()}
        fields.append(pa.field(f"col_{field.field_id}", arrow.type, metadata=field_id))
        ids.append(field.field_id)
    data = pa.table([pa.array(v, f.type) for v, f in zip(keys.values(), fields, strict=True)], schema=pa.schema(fields))
    _commit(table, [_delete_file(table, DataFileContent.EQUALITY_DELETES, data, ids, partition)])


def position_delete(table: Any, positions: dict[str, list[int]], file_scoped: bool = False) -> None:
    """Commit one position delete file deleting ``positions`` (row numbers) of data files;
    ``file_scoped`` (one data file): its ``file_path`` bounds name that file, as Iceberg 1.6+
    engines write them, so it applies to that data file only."""
    rows = sorted((path, pos) for path, ps in positions.items() for pos in ps)
    schema = pa.schema([
        pa.field("file_path", pa.string(), False, metadata={b"PARQUET:field_id": str(PATH_ID).encode()}),
        pa.field("pos", pa.int64(), False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ])
    data = pa.table([pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows], pa.int64())], schema=schema)
    bounds = {PATH_ID: next(iter(positions)).encode()} if file_scoped and len(positions) == 1 else None
    _commit(table, [_delete_file(table, DataFileContent.POSITION_DELETES, data, None, bounds=bounds)])


def _commit(table: Any, files: list[DataFile]) -> None:
    with table.transaction() as tx:
        producer = _RowDelta(operation=Operation.DELETE, transaction=tx, io=table.io)
        with producer as delta:
            for f in files:
                delta.append_data_file(f)


def data_files(table: Any) -> list[tuple[str, int]]:
    """(path, record count) of the live data files of the current snapshot, in manifest order."""
    snapshot = table.current_snapshot()
    out = []
    for manifest in snapshot.manifests(table.io) if snapshot else []:
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            out.append((entry.data_file.file_path, int(entry.data_file.record_count)))
    return out
