"""Iceberg tables read by DuckDB's own Parquet reader inside the sandbox: the fast path.

A pinned table whose data files are local is named in its query's slot by a view over
``read_parquet`` of exactly the snapshot's data files (and the delete files that apply to
them), each checked by the warehouse sandbox first. The slot that runs the query is made for
that file list (``slots.Slot``): DuckDB's ``allowed_paths`` holds exactly the real paths the
sandbox returned, external access is then turned off and the configuration locked, so no SQL
in the slot can reach any other file, and client SQL cannot name a file function at all
(``policy.py``). DuckDB then has what the Arrow-dataset path cannot give it: its own decoder,
which filters before it materializes, and row counts from the footers for its join order.

Iceberg's rules, in SQL DuckDB runs:

- columns by **field id**: ``read_parquet``'s ``schema`` parameter maps each field id of the
  read schema to the table column's current name and type, so renamed columns keep their
  values, added ones read as NULL and dropped ones are not read; the types given there are
  Iceberg's promotions (int -> long, float -> double, wider decimals), cast by the reader;
- **position deletes**: taken from the engine's cache of parsed delete files, which knows
  each position's data file whatever the delete file's scope (``_PositionPlan``): a data file
  whose positions form a few runs is a ``read_parquet`` of its own with a filter DuckDB pushes
  into the scan (no join); in a statement reading the table alone with no filter to push, the
  other files with deletes are each a ``read_parquet`` ``POSITIONAL JOIN`` a kept table of one
  flag per row in the file's order (``_PositionPlan.masks``, in an unordered slot); otherwise
  they are one ``read_parquet`` joined on
  ``file_index`` against a table of one BIT string per file (a bit per row, set where deleted)
  that the slot keeps across queries, each row kept where ``get_bit`` of its
  ``file_row_number`` is 0 (``KeptPositions``; past ``KEPT_POSITION_BYTES``, an anti-join on
  (``file_index``, ``file_row_number``) against an Arrow table of the positions registered for
  the one query). Past the bounds of that plan (many files, many positions), files sharing
  delete files are read together and anti-joined on (``file_index``, ``file_row_number``)
  against the delete files' ``file_path`` mapped to the file's index in the list (integers are
  cheaper to hash than paths) and ``pos``. The files without deletes are one plain read, no join;
- **equality deletes**: an anti-join on the key columns with ``IS NOT DISTINCT FROM`` (Iceberg
  matches NULL to NULL), for the data files the sequence-number and partition rules say;
  DuckDB's hash joins spill past the memory limit instead of holding the delete set in Python.

Data files with the same applicable delete files form one ``read_parquet`` (which data file a
delete file applies to is planned by ``catalog.deletes.plan_files``, as on every other path).
SQL writes read their target with each row's file index and position (``native_writes``).

Where a table cannot be expressed this way, ``native_table`` answers None with the reason in a
debug log, and the table goes the Arrow-dataset path (``iceberg_source``), which handles
every shape: see ``refusal`` for the list.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import BooleanExpression
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from catalog.deletes import FileDeletes, v3_fields
from catalog.lru import LockedLRU
from catalog.sandbox import ConfinedFileIO
from flight_server.engine.deleted_rows import (
    MASK_COLUMN,
    ROW_COLUMN,
    deleted_bits,
    kept_mask,
    positions_table,
    range_predicate,
)
from flight_server.engine.duckdb_types import duckdb_type as view_type
from flight_server.engine.iceberg_source import IcebergSources, quote
from flight_server.engine.splits import assign, scan_units

logger = logging.getLogger("icefloe.engine.native")

# The virtual columns a scan with deletes reads (the file's index in the list, the row's
# position in its file); a table column of either name keeps the Arrow path.
FILE_COLUMN = "file_index"
_POS_PATH_ID, _POS_ID = 2147483546, 2147483545  # position delete files' file_path and pos
# Scans plan position deletes from the cache of parsed delete files (_PositionPlan) for at most
# this many data files with deletes; past it, binding a UNION ALL of that many filtered reads
# costs more than it saves.
_PER_FILE_POSITION_READS = 64
# The types the ``read_parquet`` field-id mapping reads as the Arrow path does; the others
# (nested, uuid, fixed, nanosecond timestamps) keep the Arrow path.
_FIELD_ID_TYPES = (
    BooleanType, IntegerType, LongType, FloatType, DoubleType, DecimalType, DateType, TimeType,
    TimestampType, TimestamptzType, StringType, BinaryType,
)
# At most this many positions (delete files' record counts) are taken from the cache of parsed
# delete files for one scan; past it, DuckDB reads the delete files and joins (and spills).
_CACHED_POSITIONS = 4_000_000
# A group's deleted rows up to this many bytes (one bit per row of its files) are a table the slot
# keeps across queries (``KeptPositions``), so a warm scan registers nothing and its view is kept
# too; larger ones are positions registered for one query only.
KEPT_POSITION_BYTES = 16 << 20
# Slot tables holding kept positions are named with this prefix in the slot's ``memory.main``.
KEPT_PREFIX = "__icefloe_kept_"
# A data file's rows as kept flags (``_PositionPlan.masks``): its table's name ends so. About a
# byte per row in DuckDB's memory (a BIT string takes a bit).
_MASK_SUFFIX = "_mask"


@dataclass(frozen=True)
class NativeTable:
    """A view body over ``read_parquet`` and the real paths of every file it reads."""

    select: str
    files: tuple[str, ...]
    # (name, Arrow table) registered on the query's cursor before the view is made (the
    # positions already deleted, for a SQL write's read: ``native_writes``).
    registered: tuple[tuple[str, Any], ...] = ()
    # Position tables the view names as ``memory.main."<name>"``, which the slot keeps across
    # queries (``Slot.hold_tables``): named by content, so a slot already holding one uses it.
    kept: tuple[KeptPositions, ...] = ()
    # It reads deletes by POSITIONAL JOIN: its slot runs the reads at once, unordered (``Slot.unordered``).
    unordered: bool = False


@dataclass(frozen=True)
class KeptPositions:
    """A group of data files' deleted rows as a table a slot keeps (``_PositionPlan.kept``,
    ``_PositionPlan.masks``): ``name`` says what it holds (the files and their delete files),
    ``nbytes`` about its size, ``make`` builds it as Arrow when a slot lacks it, and ``select``
    makes the kept table from that Arrow table (named ``{loading}``)."""

    name: str
    nbytes: int
    make: Callable[[], pa.Table]
    select: str = "SELECT i, CAST(b AS BIT) AS b FROM {loading}"


def duckdb_type(typ: IcebergType) -> str | None:
    """The DuckDB type the Arrow-dataset path gives an Iceberg type (so both paths bind the
    same), or None for types this path leaves to the Arrow path (nested, uuid, fixed, nanos)."""
    return view_type(typ) if type(typ) in _FIELD_ID_TYPES else None


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _file_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join(literal(p) for p in paths) + "]"


class NativeTables:
    """Builds ``NativeTable``s; shares ``IcebergSources``' caches of file lists and deletes."""

    def __init__(self, sources: IcebergSources) -> None:
        self.sources = sources
        # delete file path -> field id -> column name in its footer (delete files never change)
        self._delete_ids: LockedLRU[str, dict[int, str]] = LockedLRU(4096)
        # (delete files' key, data file path) -> the pushed filter of its deleted positions, or
        # None where they are too many runs for one (see _PositionPlan); delete files never change.
        self._range_filters: LockedLRU[tuple[Any, str], tuple[str | None]] = LockedLRU(16384)
        # (table folder, manifest path) -> the real path the sandbox approved. A path approved
        # once stays inside its table: resolving it again per query would only cost syscalls.
        self._approved: LockedLRU[tuple[str | None, str], str] = LockedLRU(65536)
        # (table uuid, snapshot id, columns read, the files read) -> the view: each of those names
        # something immutable, so a point lookup's new key that prunes to the same files (its
        # bind, then its DoGet) finds the view text already built.
        self._built: LockedLRU[tuple[Any, ...], NativeTable] = LockedLRU(1024)
        self._rows: LockedLRU[str, int] = LockedLRU(65536)  # data file path -> its row count

    def native_table(
        self, table: Table, snapshot_id: int | None, schema: Schema,
        row_filter: BooleanExpression | None = None, split: tuple[int, int] | None = None,
        registered_name: str = "__icefloe_positions", whole: bool = False,
    ) -> NativeTable | None:
        """The table at ``snapshot_id`` as a ``read_parquet`` view, or None (Arrow path);
        ``registered_name``: the name of its table of cached positions, if it needs one;
        ``whole``: the statement reads this table alone, with no filter to push into its scan
        (its position deletes may then be a POSITIONAL JOIN per file: see ``reads``)."""
        reason = refusal(table, schema)
        if reason is None:
            try:
                return self._build(table, snapshot_id, schema, row_filter, split, registered_name, whole)
            except NotNative as exc:
                reason = str(exc)
        logger.debug("%s reads through Arrow datasets: %s", table.name(), reason)
        return None

    def _build(
        self, table: Table, snapshot_id: int | None, schema: Schema,
        row_filter: BooleanExpression | None, split: tuple[int, int] | None, registered_name: str,
        whole: bool = False,
    ) -> NativeTable:
        io = table.io
        assert isinstance(io, ConfinedFileIO)  # refusal checked
        columns = [(f.field_id, f.name, duckdb_type(f.field_type) or "") for f in schema.fields]
        if snapshot_id is None:
            return _empty(columns)
        # data_files checks every data and delete file against the table's folder (confine)
        files = self.sources.data_files(table, snapshot_id, row_filter)
        if split is not None:
            files = _split_part(files, split)
        if not files:
            return _empty(columns)
        # The columns, not only the schema id: a rolled-back transaction's staged schema id may
        # be given to other columns by a later commit of the same snapshot's table.
        key = (str(table.metadata.table_uuid), snapshot_id, tuple(columns), tuple(p for p, _, _ in files), whole)
        built = self._built.get(key)
        if built is not None:
            return built
        deletes = self.sources.file_deletes(table, snapshot_id)
        selects, allowed, registered, kept = self.reads(io, [p for p, _, _ in files], deletes, schema,
                                                        registered_name, positional=whole)
        unordered = any(k.name.endswith(_MASK_SUFFIX) for k in kept)
        built = NativeTable(" UNION ALL ".join(selects), tuple(dict.fromkeys(allowed)), registered, kept, unordered)
        if not registered:  # a view with its own Arrow positions (up to millions) is not kept
            self._built.put(key, built)
        return built

    def reads(
        self, io: ConfinedFileIO, paths: Sequence[str], deletes: dict[str, FileDeletes], schema: Schema,
        registered_name: str = "__icefloe_positions", positional: bool = False,
    ) -> tuple[list[str], list[str], tuple[tuple[str, Any], ...], tuple[KeptPositions, ...]]:
        """The SELECTs (to UNION ALL) of ``paths`` read as ``schema``, each file's deletes applied,
        the real paths they read (for the slot's allow-list), the Arrow tables the SELECTs name
        (registered under ``registered_name`` for one query: positions past
        ``KEPT_POSITION_BYTES``) and the position tables the slot keeps (``KeptPositions``; see
        ``_PositionPlan``); raises ``NotNative``."""
        columns, schema_map, outer = field_id_read(schema)
        real: dict[str, str] = {}  # manifest path -> the real local path the sandbox approved
        for path in paths:
            real[path] = self.local_path(io, path)
            if not self.sources.footer_has_ids(path, real[path], schema):
                raise NotNative(f"{path} has no Parquet field ids (name-mapped files)")
        if any(deletes.get(p) for p in paths):
            refuse_position_names(columns)
        plan = _PositionPlan.make(self, io, paths, deletes)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, path in enumerate(paths):
            file_deletes = deletes.get(path, FileDeletes())
            if path in plan.ranges:
                key: tuple[Any, ...] = ("ranges", path)
            elif path in plan.cached:
                key = ("cached", tuple(sorted(f.file_path for f in file_deletes.equality)))
            else:
                key = file_deletes.key
            groups.setdefault(key, []).append(i)
        selects: list[str] = []
        allowed = [real[p] for p in paths]
        registered: list[tuple[str, Any]] = []
        kept: list[KeptPositions] = []
        for key, indexes in groups.items():
            group = [paths[i] for i in indexes]
            applied = deletes.get(group[0], FileDeletes())
            listed = _file_list([real[p] for p in group])
            # A delete file whose bounds take in a file but names none of its rows leaves no filter.
            filtered = applied.equality or plan.ranges.get(group[0]) != ""
            numbered = ", file_row_number = true" if applied and filtered else ""
            read = f"SELECT {outer} FROM read_parquet({listed}, schema = {schema_map}{numbered}) AS d"
            where = ""
            if key[:1] == ("ranges",):
                joins = []  # the positions are a filter DuckDB pushes into the scan
                where = f" WHERE {plan.ranges[group[0]]}" if plan.ranges[group[0]] else ""
            elif key[:1] == ("cached",):
                masks = plan.masks(self, io, group, real, deletes) if positional and not applied.equality else None
                if masks is not None:  # a flag per row, lined up with the file's rows by position
                    kept.extend(masks)
                    selects.extend(f"SELECT {outer} FROM read_parquet({_file_list([real[p]])}, schema = {schema_map}) "
                                   f'AS d POSITIONAL JOIN memory.main."{m.name}" AS pm WHERE pm.{MASK_COLUMN}'
                                   for p, m in zip(group, masks, strict=True))
                    continue
                held = plan.kept(self, io, group, real, deletes)
                if held is not None:  # one bit per row, tested after a join on the file alone
                    kept.append(held)
                    joins = [f'JOIN memory.main."{held.name}" AS pd ON d.{FILE_COLUMN} = pd.i']
                    where = f" WHERE get_bit(pd.b, CAST(d.{ROW_COLUMN} AS INTEGER)) = 0"
                else:
                    name = f"{registered_name}_{len(registered)}"
                    registered.append((name, plan.table(group)))
                    joins = [f"ANTI JOIN {name} AS pd ON d.{FILE_COLUMN} = pd.i AND d.{ROW_COLUMN} = pd.pos"]
            else:
                joins = self._position_join(io, applied.positions, group, allowed)
            for f in applied.positions:
                _check_delete_file(f)
            joins += self.equality_joins(io, applied.equality, schema, allowed)
            selects.append(" ".join([read, *joins]) + where)
        return selects, allowed, tuple(registered), tuple(kept)

    def _position_join(
        self, io: ConfinedFileIO, delete_files: Sequence[DataFile], paths: list[str], allowed: list[str],
    ) -> list[str]:
        if not delete_files:
            return []
        delete_paths = []
        for f in delete_files:
            _check_delete_file(f)
            delete_paths.append(self.local_path(io, f.file_path))
        allowed.extend(delete_paths)
        deleted = f"read_parquet({_file_list(delete_paths)})"
        if len(paths) == 1:  # one file per read: the position alone (see reads)
            return [f"ANTI JOIN (SELECT pos FROM {deleted} WHERE file_path = {literal(paths[0])}) AS pd "
                    f"ON d.{ROW_COLUMN} = pd.pos"]
        # Many files share these deletes (more files with position deletes than are read one
        # by one): a delete row names its data file as the manifest does, mapped to its index.
        names = ", ".join(f"({literal(p)}, {i})" for i, p in enumerate(paths))
        return [
            f"ANTI JOIN (SELECT m.i, p.pos FROM {deleted} AS p JOIN (VALUES {names}) AS m(manifest_path, i) "
            f"ON p.file_path = m.manifest_path) AS pd ON d.{FILE_COLUMN} = pd.i AND d.{ROW_COLUMN} = pd.pos"
        ]

    def range_filter(self, io: ConfinedFileIO, deletes: FileDeletes, path: str) -> str | None:
        """``range_predicate`` of the positions ``deletes`` delete from ``path`` (cached)."""
        key = (deletes.key, path)
        found = self._range_filters.get(key)
        if found is None:  # not cached (a cached "too many runs" is the tuple (None,))
            found = (range_predicate(self.sources.delete_sets.position_arrays(io, deletes, path)),)
            self._range_filters.put(key, found)
        return found[0]

    def positions_of(self, io: ConfinedFileIO, deletes: FileDeletes, path: str) -> np.ndarray:
        """The positions of data file ``path`` its position delete files (and deletion vectors)
        delete, from the engine's cache of parsed delete files: each file's positions one after
        the other, not sorted across files (for an anti-join, which needs neither)."""
        return self.sources.delete_sets.positions(io, deletes, path, distinct=False)

    def equality_joins(
        self, io: ConfinedFileIO, delete_files: Sequence[DataFile], schema: Schema, allowed: list[str]
    ) -> list[str]:
        """The anti-joins of a read (alias ``d``) against ``delete_files`` (equality deletes),
        appending the delete files' real paths to ``allowed``; raises ``NotNative``."""
        by_ids: dict[tuple[int, ...], list[str]] = {}
        for f in delete_files:
            _check_delete_file(f)
            ids = tuple(int(i) for i in (f.equality_ids or ()))
            if not ids:
                raise NotNative(f"equality delete file {f.file_path} has no equality_ids")
            local = self.local_path(io, f.file_path)
            # A key column missing from the file would read as NULL and delete every NULL row.
            missing = set(ids) - set(self._footer_ids(f.file_path, local))
            if missing:
                raise NotNative(f"equality delete file {f.file_path} lacks field ids {sorted(missing)}")
            by_ids.setdefault(ids, []).append(local)
        joins = []
        for n, (ids, locals_) in enumerate(by_ids.items()):
            allowed.extend(locals_)
            keys = []
            for fid in ids:
                try:
                    field = schema.find_field(fid)
                except ValueError:
                    raise NotNative(f"equality field id {fid} is not in the read schema") from None
                keys.append((fid, field.name, duckdb_type(field.field_type)))
            key_map = "MAP {" + ", ".join(
                f"{fid}: {{name: {literal(f'k{fid}')}, type: {literal(typ or '')}, default_value: NULL}}"
                for fid, _, typ in keys
            ) + "}"
            alias = f"ed{n}"
            condition = " AND ".join(f"d.{quote(name)} IS NOT DISTINCT FROM {alias}.k{fid}" for fid, name, _ in keys)
            joins.append(f"ANTI JOIN read_parquet({_file_list(locals_)}, schema = {key_map}) AS {alias} ON {condition}")
        return joins

    def local_path(self, io: ConfinedFileIO, path: str) -> str:
        """The real local path of a table file, as the warehouse sandbox approves it: DuckDB gets
        this path (symlinks resolved), never the manifest's text."""
        key = (io.root, path)
        approved = self._approved.get(key)
        if approved is None:
            approved = io.confine(path)
            self._approved.put(key, approved)
        return approved

    def row_count(self, path: str, local: str) -> int:
        """Rows of data file ``path`` (its footer's count, cached: data files never change)."""
        found = self._rows.get(path)
        if found is None:
            found = int(pq.read_metadata(local).num_rows)
            self._rows.put(path, found)
        return found

    def _footer_ids(self, path: str, local: str) -> dict[int, str]:
        cached = self._delete_ids.get(path)
        if cached is None:
            physical = pq.read_schema(local)
            cached = {int(f.metadata[b"PARQUET:field_id"]): f.name for f in physical
                      if f.metadata and b"PARQUET:field_id" in f.metadata}
            self._delete_ids.put(path, cached)
        return cached


@dataclass
class _PositionPlan:
    """How a scan applies each data file's position deletes (``NativeTables.reads``).

    Taken from the engine's cache of parsed delete files, which knows each position's data file
    whatever the delete file's scope (one delete file per data file, as Iceberg 1.8+ and icefloe
    write them, or one per partition, as older writers and ``write.delete.granularity =
    partition`` do):

    - ``ranges``: positions forming few runs (a clustered DELETE) -> that file read on its own
      with a ``WHERE`` on ``file_row_number`` that DuckDB pushes into its Parquet scan: no join;
    - ``cached``: the other files' positions -> those files read together (one ``read_parquet``,
      which DuckDB parallelizes over their row groups; a read per file measured 2-3x slower on
      two cores) and tested against a bit per row that the slot keeps (``kept``), or past its
      bound anti-joined on (file index, row number) against a registered Arrow table of exactly
      the positions that apply to each (``table``): no query reads a delete file, shared or not.

    Past ``_PER_FILE_POSITION_READS`` files or ``_CACHED_POSITIONS`` positions, neither: files
    with the same delete files are read together and joined against the delete files read by
    DuckDB, which spills a join larger than its memory limit.
    """

    ranges: dict[str, str]
    cached: dict[str, np.ndarray]

    @classmethod
    def make(cls, natives: NativeTables, io: ConfinedFileIO, paths: Sequence[str],
             deletes: dict[str, FileDeletes]) -> _PositionPlan:
        plan = cls({}, {})
        with_deletes = [p for p in paths if deletes.get(p, FileDeletes()).positions]
        for p in with_deletes:
            for f in deletes[p].positions:
                _check_delete_file(f)
        if not with_deletes or len(with_deletes) > _PER_FILE_POSITION_READS:
            return plan
        distinct = {f.file_path: f for p in with_deletes for f in deletes[p].positions}
        if sum(int(f.record_count) for f in distinct.values()) > _CACHED_POSITIONS:
            return plan
        for p in with_deletes:
            found = natives.range_filter(io, deletes[p], p)
            if found is not None:
                plan.ranges[p] = found
            else:
                plan.cached[p] = natives.positions_of(io, deletes[p], p)
        return plan

    def table(self, group: Sequence[str]) -> pa.Table:
        """(i, pos) of the positions of ``group``'s files (i: the file's index in ``group``)."""
        return positions_table([self.cached[p] for p in group])

    def kept(self, natives: NativeTables, io: ConfinedFileIO, group: Sequence[str], real: dict[str, str],
             deletes: dict[str, FileDeletes]) -> KeptPositions | None:
        """``group``'s deleted rows as a table slots keep, or None past ``KEPT_POSITION_BYTES``:
        one row per file, ``(i, b)``, ``b`` a BIT string with bit ``r`` set when row ``r`` of file
        ``i`` (its index in ``group``) is deleted, as long as the file has rows.

        The read joins it on ``file_index`` alone (a handful of rows) and tests its row's bit
        (``get_bit``): in plain DuckDB on 5M rows with 1% deleted this took 20% less CPU than the
        hash anti-join on (file, position) (``docs/deletes.md``). Its size is one bit per row of
        the files, whatever the share deleted.

        Its name is a digest of the files and of each file's delete files (what decides the
        rows), so two scans of the same files at the same deletes name the same table. ``make``
        runs only in a slot that lacks the table; it takes the positions from the cache of parsed
        delete files again rather than holding them, so a kept view (``_built``) holds none."""
        rows = [natives.row_count(p, real[p]) for p in group]
        if max(rows) >= 2**31 or sum(rows) // 8 > KEPT_POSITION_BYTES:
            return None  # get_bit takes an INTEGER bit index
        applied = {p: deletes[p] for p in group}
        what = repr([(p, applied[p].key) for p in group]).encode()
        return KeptPositions(KEPT_PREFIX + hashlib.sha256(what).hexdigest()[:32], sum(rows) // 8 + 1,
                             lambda: deleted_bits([natives.positions_of(io, applied[p], p) for p in group], rows))

    def masks(self, natives: NativeTables, io: ConfinedFileIO, group: Sequence[str], real: dict[str, str],
              deletes: dict[str, FileDeletes]) -> list[KeptPositions] | None:
        """Each of ``group``'s files as a table slots keep, one BOOLEAN per row in the file's
        row order (false: deleted), for a read of the file ``POSITIONAL JOIN`` it; None past
        ``KEPT_POSITION_BYTES`` (a byte per row here), where ``kept``'s bits take over.

        A positional join lines the two up without a hash or a row number: on 5M rows in 10
        files with 1% deleted, in plain DuckDB, a count and sum took 1.2x the plain scan's time
        against 4.4x with ``kept``'s join and ``get_bit`` (``docs/deletes.md``). DuckDB pushes
        no filter below a positional join, so only a statement with no filter to push into
        this table's scan reads it this way (``NativeTables.native_table``'s ``whole``). Named
        like ``kept`` by what decides the rows: the file and its delete files."""
        rows = [natives.row_count(p, real[p]) for p in group]
        if sum(rows) > KEPT_POSITION_BYTES:
            return None
        masks = []
        for p, n in zip(group, rows, strict=True):
            applied = deletes[p]
            digest = hashlib.sha256(repr((p, applied.key)).encode()).hexdigest()[:32]
            masks.append(KeptPositions(KEPT_PREFIX + digest + _MASK_SUFFIX, n + 1,
                                       functools.partial(_mask_of, natives, io, applied, p, n),
                                       f"SELECT {MASK_COLUMN} FROM {{loading}} ORDER BY r"))
        return masks


def _mask_of(natives: NativeTables, io: ConfinedFileIO, applied: FileDeletes, path: str, rows: int) -> pa.Table:
    return kept_mask(natives.positions_of(io, applied, path), rows)


def field_id_read(schema: Schema) -> tuple[list[tuple[int, str, str]], str, str]:
    """(field id, name, DuckDB type) of the read schema's columns; the ``schema`` argument of a
    ``read_parquet`` reading them by field id; the select list of them from alias ``d``."""
    columns = [(f.field_id, f.name, duckdb_type(f.field_type) or "") for f in schema.fields]
    schema_map = "MAP {" + ", ".join(
        f"{fid}: {{name: {literal(name)}, type: {literal(typ)}, default_value: NULL}}" for fid, name, typ in columns
    ) + "}"
    return columns, schema_map, ", ".join(f"d.{quote(name)}" for _, name, _ in columns)


def refuse_position_names(columns: list[tuple[int, str, str]]) -> None:
    if any(name in (FILE_COLUMN, ROW_COLUMN) for _, name, _ in columns):
        raise NotNative("a column is named like the row-position columns of a scan with deletes")


class NotNative(Exception):
    """This table (at this snapshot) keeps the Arrow-dataset path; the message says why."""


def refusal(table: Table, schema: Schema) -> str | None:
    """Why a table as a whole cannot take this path (None: it may)."""
    if not isinstance(table.io, ConfinedFileIO) or not table.io.warehouse.local:
        # Object stores keep the Arrow path (DuckDB would need httpfs and the table's keys);
        # without a warehouse sandbox no path could be checked before DuckDB opens it.
        return "not a local warehouse"
    for f in schema.fields:
        if duckdb_type(f.field_type) is None:
            return f"column {f.name} has type {f.field_type}, which the field-id mapping does not cover"
    return None


def _check_delete_file(delete_file: DataFile) -> None:
    if delete_file.file_format != FileFormat.PARQUET or v3_fields(delete_file)[1] is not None:
        # Deletion vectors are Puffin blobs and Avro / ORC delete files need their own readers.
        raise NotNative(f"delete file {delete_file.file_path} is not a Parquet delete file")


def _split_part(
    files: list[tuple[str, int, tuple[int, ...]]], split: tuple[int, int]
) -> list[tuple[str, int, tuple[int, ...]]]:
    """The files of part k of n, dealt as ``iceberg_source`` deals them; a part holding single
    row groups of a file keeps the Arrow path (``read_parquet`` reads whole files)."""
    k, n = split
    units = scan_units(files)
    mine = [u for u, part in zip(units, assign([u.bytes for u in units], n), strict=True) if part == k]
    if any(u.row_group is not None for u in mine):
        raise NotNative("a split part holds row groups of a file")
    wanted = {u.path for u in mine}
    return [f for f in files if f[0] in wanted]


def _empty(columns: list[tuple[int, str, str]]) -> NativeTable:
    select = ", ".join(f"CAST(NULL AS {typ}) AS {quote(name)}" for _, name, typ in columns)
    return NativeTable(f"SELECT {select} WHERE false", ())
