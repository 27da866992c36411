"""Row-level deletes: which delete files apply to which data file, and which rows they remove.

Iceberg's rules (spec "Scan Planning"), applied to the live entries of one snapshot:

- a **position delete** file (Parquet ``file_path``, ``pos``) or a **deletion vector** (v3, a
  Puffin blob naming one data file) applies to a data file whose data sequence number is
  *smaller than or equal to* its own, in the same partition (spec id + partition tuple), or,
  when it names its data file (``referenced_data_file`` or equal path bounds), to that file;
- an **equality delete** file applies to a data file whose data sequence number is *strictly
  smaller* than its own, in the same partition, or to every partition when its spec is
  unpartitioned (a global delete). A row is deleted when its values of the file's
  ``equality_ids`` fields equal a delete row's, NULL equal to NULL; fields are matched by id,
  so a column renamed since the delete was written still matches.

Rows are removed set-wise, one Arrow batch at a time: position deletes as a numpy mask over
the batch's row positions, equality deletes as a semi-join of the batch's keys against the
delete keys (Acero hash join, NULLs made comparable by an is-null flag per key). Nothing runs
per row in Python. Delete sets are read once per (delete file) and cached (files never change).

This module has no Flight or DuckDB import: the catalog's compaction uses it as the engine does.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.avro.file import AvroFile
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
from pyiceberg.table import ManifestGroupPlanner
from pyiceberg.table.metadata import TableMetadata

from catalog.env_settings import byte_budget
from catalog.lru import LockedLRU
from catalog.puffin import read_deletion_vector
from catalog.sandbox import confine

logger = logging.getLogger("icefloe.catalog.deletes")

_PATH_FIELD_ID = 2147483546  # position delete files' file_path column
_INITIAL_SEQUENCE_NUMBER = 0


def v3_fields(delete_file: DataFile) -> tuple[str | None, int | None, int | None]:
    """(referenced_data_file, content_offset, content_size_in_bytes) of a delete file read with
    the v3 manifest schema (``read_delete_manifest``); Nones otherwise. pyiceberg 0.12 reads
    manifests with the v2 schema, which drops these fields, and has no properties for them."""
    data = delete_file._data
    if len(data) >= 20:
        return data[17], data[18], data[19]
    return None, None, None


# (manifest path, sequence numbers) -> its live entries. A manifest file never changes once
# written, and every row-level write re-plans the table: without this, each statement read
# every delete manifest of the table again (a fixed cost growing with the table's history).
_DELETE_MANIFESTS: LockedLRU[tuple[str, int, int], list[ManifestEntry]] = LockedLRU(1024)


def read_delete_manifest(io: FileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    """Live entries of a delete manifest, read with the v3 schema (keeps the deletion vector
    fields; a v2 manifest simply lacks them). Callers must not change the entries (cached)."""
    key = (manifest.manifest_path, int(manifest.sequence_number or 0), int(manifest.min_sequence_number or 0))
    cached = _DELETE_MANIFESTS.get(key)
    if cached is not None:
        return cached
    entries = _read_delete_manifest(io, manifest)
    _DELETE_MANIFESTS.put(key, entries)
    return entries


def _read_delete_manifest(io: FileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return [_inherit_from_manifest(e, manifest) for e in reader if e.status != ManifestEntryStatus.DELETED]


@dataclass(frozen=True)
class FileDeletes:
    """The delete files that apply to one data file (as manifest ``DataFile`` objects)."""

    positions: tuple[DataFile, ...] = ()  # position delete files and deletion vectors
    equality: tuple[DataFile, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.positions or self.equality)

    @property
    def key(self) -> tuple[tuple[str, int | None], ...]:
        """Identity of the delete set (a deletion vector is a blob of a file: its offset counts)."""
        return tuple(sorted((f.file_path, v3_fields(f)[1]) for f in (*self.positions, *self.equality)))

    def files(self) -> tuple[DataFile, ...]:
        return (*self.positions, *self.equality)


@dataclass(frozen=True)
class PlannedFile:
    data_file: DataFile
    sequence_number: int
    deletes: FileDeletes = field(default_factory=FileDeletes)


def _partition_key(data_file: DataFile) -> tuple[int, Any]:
    partition = data_file.partition
    return int(data_file.spec_id or 0), tuple(cast(Any, partition)) if partition is not None else ()


def _referenced_path(delete_file: DataFile) -> str | None:
    """The one data file a position delete file or deletion vector names, if it names one."""
    referenced = v3_fields(delete_file)[0]
    if referenced:
        return str(referenced)
    lower, upper = delete_file.lower_bounds or {}, delete_file.upper_bounds or {}
    low, high = lower.get(_PATH_FIELD_ID), upper.get(_PATH_FIELD_ID)
    if low is not None and low == high:
        try:
            return bytes(low).decode()
        except UnicodeDecodeError:
            return None
    return None


def _may_name(delete_file: DataFile, path: str) -> bool:
    """Whether a partition-scoped position delete file's path bounds may include ``path``."""
    lower, upper = delete_file.lower_bounds or {}, delete_file.upper_bounds or {}
    low, high = lower.get(_PATH_FIELD_ID), upper.get(_PATH_FIELD_ID)
    encoded = path.encode()
    # Iceberg truncates string bounds (lower: a prefix; upper: a prefix with its last byte bumped).
    if low is not None and bytes(low) > encoded:
        return False
    return high is None or encoded <= bytes(high) or encoded.startswith(bytes(high)[:-1])


class DeleteIndex:
    """Delete files of one snapshot, indexed as the spec scopes them."""

    def __init__(self, metadata: TableMetadata) -> None:
        self._unpartitioned = {spec.spec_id for spec in metadata.specs().values() if spec.is_unpartitioned()}
        self._pos_by_path: dict[str, list[tuple[int, DataFile]]] = {}
        self._pos_by_partition: dict[tuple[int, Any], list[tuple[int, DataFile]]] = {}
        self._eq_global: list[tuple[int, DataFile]] = []
        self._eq_by_partition: dict[tuple[int, Any], list[tuple[int, DataFile]]] = {}

    def __bool__(self) -> bool:
        return bool(self._pos_by_path or self._pos_by_partition or self._eq_global or self._eq_by_partition)

    def add(self, entry: ManifestEntry) -> None:
        delete_file = entry.data_file
        seq = int(entry.sequence_number if entry.sequence_number is not None else _INITIAL_SEQUENCE_NUMBER)
        if delete_file.content == DataFileContent.POSITION_DELETES:
            target = _referenced_path(delete_file)
            if target is not None:
                self._pos_by_path.setdefault(target, []).append((seq, delete_file))
            else:
                self._pos_by_partition.setdefault(_partition_key(delete_file), []).append((seq, delete_file))
        elif delete_file.content == DataFileContent.EQUALITY_DELETES:
            if int(delete_file.spec_id or 0) in self._unpartitioned:
                self._eq_global.append((seq, delete_file))
            else:
                self._eq_by_partition.setdefault(_partition_key(delete_file), []).append((seq, delete_file))

    def for_data_file(self, seq: int, data_file: DataFile) -> FileDeletes:
        path, key = data_file.file_path, _partition_key(data_file)
        positions = [f for s, f in self._pos_by_path.get(path, ()) if s >= seq]
        positions += [f for s, f in self._pos_by_partition.get(key, ()) if s >= seq and _may_name(f, path)]
        equality = [f for s, f in (*self._eq_global, *self._eq_by_partition.get(key, ())) if s > seq]
        return FileDeletes(tuple(positions), tuple(equality))


def file_filter(table: Any, row_filter: BooleanExpression, case_sensitive: bool = False) -> Callable[[DataFile], bool]:
    """Whether a live data file of ``table`` may hold rows matching ``row_filter``: the same
    partition and min/max tests ``plan_files`` applies to manifest entries, for files already
    read from the manifests (so each new filter needs no manifest read)."""
    planner = ManifestGroupPlanner(table.metadata, table.io, row_filter, case_sensitive)
    partitions: dict[int, Callable[[DataFile], bool]] = {}
    metrics = planner._build_metrics_evaluator()  # pyiceberg's own evaluators (pinned <0.13)

    def may_match(data_file: DataFile) -> bool:
        partition = partitions.get(data_file.spec_id)
        if partition is None:
            partition = partitions[data_file.spec_id] = planner._build_partition_evaluator(data_file.spec_id)
        return partition(data_file) and metrics(data_file)

    return may_match


def plan_files(
    metadata: TableMetadata, io: FileIO, snapshot_id: int, row_filter: BooleanExpression | None = None,
    case_sensitive: bool = False,
) -> list[PlannedFile]:
    """The snapshot's live data files the row filter may match, each with the deletes that
    apply to it, in manifest order (manifests only: no data or delete file is opened)."""
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return []
    planner = ManifestGroupPlanner(metadata, io, row_filter or AlwaysTrue(), case_sensitive)
    data: list[ManifestEntry] = []
    index = DeleteIndex(metadata)
    manifests = snapshot.manifests(io)
    # Delete manifests are read whole, with the v3 schema (deletion vectors' fields); only
    # data manifests are pruned by the row filter.
    for manifest in manifests:
        if manifest.content == ManifestContent.DELETES:
            for entry in read_delete_manifest(io, manifest):
                index.add(entry)
    data_manifests = [m for m in manifests if m.content == ManifestContent.DATA]
    for entries in planner.plan_manifest_entries(data_manifests):
        for entry in entries:
            if entry.data_file.content == DataFileContent.DATA:
                data.append(entry)
            else:
                index.add(entry)
    planned = []
    for entry in data:
        seq = int(entry.sequence_number if entry.sequence_number is not None else _INITIAL_SEQUENCE_NUMBER)
        deletes = index.for_data_file(seq, entry.data_file) if index else FileDeletes()
        planned.append(PlannedFile(entry.data_file, seq, deletes))
    return planned


# -- reading delete sets ----------------------------------------------------------------------


DEFAULT_CACHE_BYTES = 256 << 20
CACHE_BYTES_ENV = "ICEFLOE_DELETE_CACHE_BYTES"


def cache_budget() -> int:
    """Bytes of delete sets a reader keeps cached (``ICEFLOE_DELETE_CACHE_BYTES``, default 256 MiB)."""
    return byte_budget(CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES, logger)


class _BudgetCache:
    """Least-recently-used entries whose sizes add up to at most ``budget`` bytes.

    A count-bounded cache of delete sets is not bounded in memory: one set can hold millions of
    positions or keys. An entry larger than the whole budget is not kept at all (it is read
    again when needed), so a large delete set costs memory only while a scan uses it.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.held = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        if size > self.budget:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.held -= old[1]
            self._entries[key] = (value, size)
            self.held += size
            while self.held > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.held -= dropped


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (int64), sorted: one sort and a look at neighbours.
    numpy 2.4's ``unique`` hashes first and took 120 ms for 400k positions where this takes 4."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


class DeleteSets:
    """Reads and caches delete sets: per delete file, since delete files never change; the
    cache holds at most ``budget`` bytes (``cache_budget()`` when not given)."""

    def __init__(self, budget: int | None = None) -> None:
        self._cache = _BudgetCache(cache_budget() if budget is None else budget)

    @property
    def held_bytes(self) -> int:
        return self._cache.held

    def positions(self, io: FileIO, deletes: FileDeletes, data_path: str, distinct: bool = True) -> np.ndarray:
        """Sorted unique deleted positions of ``data_path`` (int64); ``distinct=False``: each
        delete file's positions one after the other, unsorted across files and possibly repeated
        (for an anti-join, which needs neither, and no sort of every earlier position)."""
        arrays = self.position_arrays(io, deletes, data_path)
        if not arrays:
            return np.empty(0, dtype=np.int64)
        if len(arrays) == 1:
            return arrays[0]
        return distinct_sorted(np.concatenate(arrays)) if distinct else np.concatenate(arrays)

    def position_arrays(self, io: FileIO, deletes: FileDeletes, data_path: str) -> list[np.ndarray]:
        """The deleted positions of ``data_path``, one sorted, distinct int64 array per delete
        file that deletes some (as parsed or remembered; not to be changed)."""
        found = [self._file_positions(io, f).get(data_path) for f in deletes.positions]
        return [a for a in found if a is not None and len(a)]

    def remember_positions(self, delete_path: str, positions: dict[str, np.ndarray]) -> None:
        """Hold the positions a writer has just written to a new position delete file (per data
        file path: sorted, distinct int64, as a read of the file gives), so that the next read
        of those data files does not read and sort the file back (a merge-on-read statement's
        next one would otherwise do exactly that)."""
        held = {path: np.array(values, dtype=np.int64) for path, values in positions.items()}  # own copies
        self._cache.put(("positions", delete_path, None), held, sum(int(a.nbytes) + len(p) for p, a in held.items()))

    def _file_positions(self, io: FileIO, delete_file: DataFile) -> dict[str, np.ndarray]:
        referenced, offset, size = v3_fields(delete_file)
        key = ("positions", delete_file.file_path, offset)
        cached: dict[str, np.ndarray] | None = self._cache.get(key)
        if cached is not None:
            return cached
        confine(io, delete_file.file_path)  # delete files too: nothing outside the table's folder
        if delete_file.file_format == FileFormat.PUFFIN:
            if referenced is None:
                raise ValueError("a deletion vector without referenced_data_file")
            result = {referenced: read_deletion_vector(io, delete_file.file_path, offset, size, referenced)}
        else:
            table = _read_parquet(io, delete_file.file_path, ["file_path", "pos"])
            result = {}
            paths = table.column("file_path").combine_chunks()
            positions = table.column("pos").combine_chunks()
            encoded = pc.dictionary_encode(paths)
            for index, path in enumerate(encoded.dictionary.to_pylist()):
                mask = pc.equal(encoded.indices, index)
                values = positions.filter(mask).to_numpy(zero_copy_only=False).astype(np.int64)
                result[str(path)] = distinct_sorted(values)
        self._cache.put(key, result, sum(int(a.nbytes) + len(p) for p, a in result.items()))
        return result

    def equality_keys(self, io: FileIO, delete_file: DataFile) -> pa.Table:
        """The delete rows' key columns, named ``str(field_id)``."""
        cached: pa.Table | None = self._cache.get(("keys", delete_file.file_path))
        if cached is not None:
            return cached
        confine(io, delete_file.file_path)
        ids = [int(i) for i in (delete_file.equality_ids or [])]
        if not ids:
            raise ValueError("an equality delete file without equality_ids")
        with io.new_input(delete_file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream)
            by_id = _footer_ids(parquet.schema_arrow)
            missing = [i for i in ids if i not in by_id]
            if missing:
                raise ValueError(f"equality delete file lacks field ids {missing}")
            table = parquet.read(columns=[by_id[i] for i in ids])
        table = table.rename_columns([str(i) for i in ids])
        self._cache.put(("keys", delete_file.file_path), table, int(table.nbytes))
        return table


def _read_parquet(io: FileIO, path: str, columns: list[str]) -> pa.Table:
    with io.new_input(path).open() as stream:
        return pq.ParquetFile(stream).read(columns=columns)


def _footer_ids(schema: pa.Schema) -> dict[int, str]:
    ids = {}
    for f in schema:
        raw = (f.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            ids[int(raw)] = f.name
    return ids
