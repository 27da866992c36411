"""Scan paths that bypass SQL execution in the sandbox: native Parquet reads and plain scans.

Both produce exactly the schema the sandboxed binder reported for the query. The native
reader lives in an internal DuckDB database with file access; it runs only SQL that icefloe
writes itself (the pinned files, the column mapping, and conjuncts re-rendered from literals
icefloe parsed), never client text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from flight_server.engine import duckdb_seam
from flight_server.engine.iceberg_source import MISSING_COLUMN, quote
from flight_server.engine.pushdown import plain_projection, safe_conjuncts
from flight_server.engine.table_reads import TableReads

if TYPE_CHECKING:
    from flight_server.engine.tables import PinnedTable
    from flight_server.engine.watchdog import Running

logger = logging.getLogger("icefloe.engine.scans")

BATCH_ROWS = 122_880  # DuckDB's natural multiple of its 2048-row vectors
# Column types the native scan casts to by name (nested types keep the dataset path).
_SIMPLE_TYPE = re.compile(r"[A-Z_ ]+(\(\d+,\s*\d+\))?")


class ScanPaths:
    def __init__(self, catalog: Any, spill_dir: str, tables: TableReads) -> None:
        self.catalog = catalog
        self.tables = tables
        self.native = duckdb.connect(
            ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                "temp_directory": spill_dir}
        )
        self.native.execute("SET python_enable_replacements = false")
        self.native.execute("SET lock_configuration = true")

    def plain_scan(
        self, run: Running, sql: str, target: pa.Schema, type_names: list[str]
    ) -> pa.RecordBatchReader | None:
        """``SELECT cols FROM t``: stream the scan itself, with no SQL engine over it.

        ``target`` is the binder's Arrow schema of the query, ``type_names`` its DuckDB types.

        The pinned files' Arrow datasets stream straight to the client when every column's
        values need no real cast (Arrow's Parquet reader, dictionary-encoded strings decoded
        by one ``take``: the cheapest path, in C++ end to end); otherwise local files are read
        by DuckDB's native Parquet reader (the internal database, on SQL we write), which casts.
        Either way the schema is the binder's, so clients see exactly what the sandboxed DuckDB
        path would send: the same columns, types, nulls, and rows in the same order (the
        parts one after another, each in file and row group order).
        """
        selected = plain_projection(sql)
        if selected is None or not run.parts:
            return None
        if len(set(target.names)) != len(target.names):
            return None
        plans: list[tuple[Any, list[str]]] = []
        for part in run.parts:
            physical = _physical_columns(part, selected)
            if physical is None or len(physical) != len(target):
                return None
            plans.append((part, physical))
        if all(_same_values(part.data.schema.field(phys).type, field.type)
               for part, physical in plans for phys, field in zip(physical, target, strict=True)):
            return _dataset_stream(plans, target)
        if len(plans) == 1:
            part, physical = plans[0]
            return self.native_reader(run, part, physical, target, type_names, "")
        return None

    def native_reader(
        self, run: Running, part: Any, physical: list[str], target: pa.Schema, type_names: list[str], where: str
    ) -> pa.RecordBatchReader | None:
        """The pinned files of one local dataset read by DuckDB's native Parquet reader, on SQL we
        write, typed as ``target``; None where that reader cannot stand in for the dataset."""
        if not isinstance(part.data, ds.FileSystemDataset) or not isinstance(
            part.data.filesystem, pafs.LocalFileSystem
        ):
            return None  # object stores would need DuckDB's httpfs; the dataset path reads them
        if part.partial_files:
            return None  # read_parquet reads whole files; the dataset reads the chosen row groups
        if getattr(part, "has_deletes", False):
            return None  # read_parquet would return deleted rows; the dataset's scanner leaves them out
        if any(p.startswith(MISSING_COLUMN.format("")) for p in physical):
            return None
        if any(not _SIMPLE_TYPE.fullmatch(t) for t in type_names):
            return None
        select = ", ".join(
            f"CAST({quote(phys)} AS {t}) AS {quote(name)}"
            for phys, name, t in zip(physical, target.names, type_names, strict=True)
        )
        files = ", ".join("'" + f.replace("'", "''") + "'" for f in part.data.files)
        native = self.native.cursor()
        run.helpers.append(native)
        sql = f"SELECT {select} FROM read_parquet([{files}])" + (f" WHERE {where}" if where else "")
        reader = native.sql(sql).to_arrow_reader(BATCH_ROWS)
        if reader.schema != target:
            logger.warning("native scan schema differs from the bound schema; using the dataset scan")
            return None
        return reader

    def native_scan(self, run: Running, pins: list[PinnedTable], sql: str) -> None:
        """Selective single-table queries: read through DuckDB's own Parquet reader.

        Arrow datasets decode every column of a row group before filtering; DuckDB's reader
        filters first and materializes only matching rows. The client's SQL never reaches this
        reader: it runs in a separate, unsandboxed DuckDB database on SQL we write (the pinned
        files, the column mapping, and the safe conjuncts re-rendered from parsed literals).
        Its stream then replaces the table's view in the sandbox, typed exactly as before.
        """
        if len(pins) != 1 or len(run.parts) != 1:
            return
        part = run.parts[0]
        table = self.tables.load(pins[0].namespace, pins[0].name)
        schema = table.schemas().get(pins[0].schema_id) or table.schema()
        conjuncts = safe_conjuncts(sql, schema)
        if not conjuncts:
            return
        view = run.views[0]
        sig = duckdb_seam.bind(run.cursor, f"SELECT * FROM {view}")
        target = arrow_schema(run.cursor, sig.names, sig.types)
        phys_of = {name: phys for phys, name in part.columns}
        where = " AND ".join(c.sql(quote(phys_of[c.column])) for c in conjuncts)
        physical = [phys for phys, _ in part.columns]
        stream = self.native_reader(run, part, physical, target, [str(t) for t in sig.types], where)
        if stream is None:
            return
        run.cursor.register("__icefloe_native_0", stream)
        run.cursor.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM __icefloe_native_0")


def _physical_columns(part: Any, selected: list[str]) -> list[str] | None:
    """The part's column (by its name in the data) behind each selected item, ``*`` expanded."""
    by_name = {name.lower(): phys for phys, name in part.columns}
    physical: list[str] = []
    for item in selected:
        if item == "*":
            physical.extend(phys for phys, _ in part.columns)
        elif item.lower() in by_name:
            physical.append(by_name[item.lower()])
        else:
            return None
    return physical


def _scan(part: Any, physical: list[str], target: pa.Schema) -> pa.RecordBatchReader:
    columns = {field.name: ds.field(phys) for phys, field in zip(physical, target, strict=True)}
    # use_threads: Arrow decodes a batch's columns in parallel and reads the next file ahead
    # while gRPC sends (CPU per scan about the same as one thread; bench_flightsql_scan).
    if getattr(part, "has_deletes", False):
        return _deleted_scan(part, physical, target)
    scanner = ds.Scanner.from_dataset(part.data, columns=columns, batch_size=BATCH_ROWS, use_threads=True)
    return scanner.to_reader().cast(target)


def _deleted_scan(part: Any, physical: list[str], target: pa.Schema) -> pa.RecordBatchReader:
    """A dataset with deletes read through its own scanner (engine.deletes), which C++'s
    ``Scanner.from_dataset`` would bypass; columns renamed and cast to ``target``."""
    unique = list(dict.fromkeys(physical))
    reader = part.data.scanner(columns=unique, batch_size=BATCH_ROWS).to_reader()

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            columns = [batch.column(unique.index(p)).cast(f.type) for p, f in zip(physical, target, strict=True)]
            yield pa.RecordBatch.from_arrays(columns, schema=target)

    return pa.RecordBatchReader.from_batches(target, batches())


def _dataset_stream(plans: list[tuple[Any, list[str]]], target: pa.Schema) -> pa.RecordBatchReader:
    """The parts' scans one after another as one reader typed ``target`` (a part's scan starts
    when the one before it ends, so only one reads ahead at a time)."""
    if len(plans) == 1:
        return _scan(*plans[0], target)

    def batches() -> Iterator[pa.RecordBatch]:
        for part, physical in plans:
            yield from _scan(part, physical, target)

    return pa.RecordBatchReader.from_batches(target, batches())


def _same_values(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether casting ``source`` to ``target`` only changes offsets width, never values."""
    if source == target:
        return True
    pairs = ((pa.types.is_large_string, pa.types.is_string), (pa.types.is_large_binary, pa.types.is_binary))
    return any(a(source) and b(target) for a, b in pairs)


def arrow_schema(cur: duckdb.DuckDBPyConnection, names: list[str], types: list[Any]) -> pa.Schema:
    """Arrow schema for bound columns.

    A type the binder could not infer (a bare ``?``) is given as utf8: the JDBC driver cannot
    bind any value to a null-typed parameter, and DuckDB casts a string where the SQL needs it.
    """
    fields = []
    for name, typ in zip(names, types, strict=True):
        if str(typ) == "UNKNOWN":
            fields.append(pa.field(name, pa.utf8()))
        else:
            fields.append(duckdb_seam.arrow_field(cur, name, typ))
    return pa.schema(fields)
