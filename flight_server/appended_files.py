"""Reading the data files that appends added, many at a time, as the rows of their commits.

A change scan over many small appends reads one small file per commit. pyiceberg's
``ArrowScan`` costs ~2 ms of Python per file (it converts the file's schema, opens it, and
projects every batch in Python), which made a change scan of 100 ten-row appends 2.9x the
``SELECT`` that reads the same files (``bench_change_scan``). Here a run of consecutive files
with the same column layout is one Arrow dataset scan: Arrow opens, reads ahead and decodes the
files in C++, and each batch comes back tagged with its file, so it gets its own commit's
``_seq``, ``_snapshot_id`` and ``_operation``.

Columns are matched by Iceberg field id as the SQL engine's sources do
(``engine.iceberg_source``): the footer's ids (cached; data files never change), typed nulls for
columns a file lacks, Arrow's casts for promoted types. So a change scan and a ``SELECT`` of
the same files give the same values.

Only what this path reads exactly as ``ArrowScan`` does is taken (``readable``): local Parquet
files that carry field ids, under schemas of primitive columns. Nested columns evolve by id
inside structs, and files without ids (``add_files``) are read through the table's name
mapping: the caller reads those with ``ArrowScan``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.schema import Schema

from catalog.arrow_types import view_columns
from catalog.commit_log import CommitRecord
from catalog.lru import LockedLRU
from flight_server.engine.iceberg_source import MISSING_COLUMN, dictionary_columns, footer_field_ids, small_types
from flight_server.engine.scans import BATCH_ROWS
from flight_server.feed.commit_columns import with_commit_columns


@dataclass(frozen=True)
class _Layout:
    ids: tuple[tuple[int, str], ...]  # (field id, physical column name), sorted
    dictionary: frozenset[str]  # string columns stored as small dictionaries (read as such)


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI or a plain path; None for any other scheme."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return None if "://" in uri else uri


class AppendedFiles:
    """Streams appended data files as commit rows (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._layouts: LockedLRU[str, _Layout] = LockedLRU(65536)  # local path -> its layout
        self._fs = pafs.LocalFileSystem()

    def readable(self, schema: Schema, files: Sequence[DataFile]) -> bool:
        """Whether ``batches`` reads these files exactly (else use pyiceberg's ``ArrowScan``).
        Reads the footers of files not seen before (cached)."""
        if not all(f.field_type.is_primitive for f in schema.fields):
            return False
        for data_file in files:
            path = local_path(data_file.file_path)
            if data_file.file_format != FileFormat.PARQUET or path is None:
                return False
            try:
                if self._layout(path) is None:
                    return False
            except FileNotFoundError:
                return False  # the slow path reports it, with its commit
        return True

    def batches(
        self, files: Sequence[tuple[CommitRecord, DataFile]], schema: Schema, target: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``files`` (each with the commit that added it), in order, projected onto
        ``schema`` by field id, as ``target`` (the table's columns, then the commit columns).

        Every file must be ``readable``. Raises FileNotFoundError for a file gone meanwhile.
        """
        arrow = schema_to_pyarrow(schema, include_field_ids=False)
        arrow = pa.schema([f.with_type(small_types(f.type)) for f in arrow])
        run: list[tuple[CommitRecord, str]] = []
        run_layout: _Layout | None = None
        for record, data_file in files:
            path = local_path(data_file.file_path)
            assert path is not None, "only readable files come here"
            layout = self._layout(path)
            assert layout is not None, "only readable files come here"
            if run and layout != run_layout:
                yield from self._scan(run, run_layout, schema, arrow, target)
                run = []
            run.append((record, path))
            run_layout = layout
        if run:
            yield from self._scan(run, run_layout, schema, arrow, target)

    def _scan(
        self, run: list[tuple[CommitRecord, str]], layout: _Layout | None, schema: Schema, arrow: pa.Schema,
        target: pa.Schema,
    ) -> Iterator[pa.RecordBatch]:
        assert layout is not None
        by_id = dict(layout.ids)
        fields, columns = [], {}
        for f, af in zip(schema.fields, arrow, strict=True):
            phys = by_id.get(f.field_id, MISSING_COLUMN.format(f.field_id))
            fields.append(pa.field(phys, af.type, nullable=True))
            columns[f.name] = ds.field(phys)
        dictionary = sorted(layout.dictionary & set(by_id.values()))
        parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=dictionary))
        fragments = [parquet.make_fragment(path, filesystem=self._fs) for _, path in run]
        dataset = ds.FileSystemDataset(fragments, schema=pa.schema(fields), format=parquet, filesystem=self._fs)
        record_of = {path: record for record, path in run}
        scanner = ds.Scanner.from_dataset(dataset, columns=columns, batch_size=BATCH_ROWS, use_threads=True)
        for tagged in scanner.scan_batches():
            batch = tagged.record_batch
            if batch.num_rows:
                yield with_commit_columns(batch, target, record_of[tagged.fragment.path])

    def _layout(self, path: str) -> _Layout | None:
        """The file's columns by field id; None for a file written without field ids."""
        cached = self._layouts.get(path)
        if cached is not None:
            return cached if cached.ids else None
        meta = pq.read_metadata(path, filesystem=self._fs)
        physical = meta.schema.to_arrow_schema()
        ids = footer_field_ids(physical)
        # columns stored as views read as dictionaries too: how filters on them bind (catalog.arrow_types)
        layout = _Layout(tuple(sorted(ids.items())), dictionary_columns(meta, physical) | view_columns(physical))
        self._layouts.put(path, layout)
        return layout if ids else None


_shared: AppendedFiles | None = None


def shared_reader() -> AppendedFiles:
    """The process's reader (its footer cache serves every stream: data files never change)."""
    global _shared
    if _shared is None:
        _shared = AppendedFiles()
    return _shared
