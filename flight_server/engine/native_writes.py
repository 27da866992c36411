"""The reads of SQL writes (DELETE, UPDATE, MERGE) through DuckDB's own Parquet reader.

A SQL write names the target's data files it reads (``sqlwrite.target_files``: the base
snapshot's files, pruned by partition and column bounds) and wants each row's file, as the
file's index in that list (``__icefloe_file``), and for merge-on-read each row's position in
its file (``__icefloe_pos``: the position delete it will write). Read here, the target is one
view in the query's slot: ``read_parquet`` of those files with ``file_row_number``, columns by
field id, the deletes already committed applied as anti-joins (``NativeTables.reads``). The
whole statement (``SELECT __icefloe_file, __icefloe_pos [, new values] FROM target WHERE
cond``, or MERGE's join) is then ONE DuckDB query over every candidate file: the condition is
evaluated in DuckDB's reader (filters pushed into the scan), rows already deleted are left out
in the same query, and no row crosses into Python before it is a match. The slot's allow-list
is exactly these files and their delete files, as for every native read.

Shapes the field-id mapping cannot express (and S3 tables) answer None: the caller reads
through per-file Arrow sources (``IcebergSources.file_parts``), which handle every shape.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyiceberg.schema import Schema
from pyiceberg.table import Table

from catalog.deletes import FileDeletes
from catalog.sandbox import ConfinedFileIO
from flight_server.engine.deletes import POSITION_COLUMN
from flight_server.engine.native_tables import FILE_COLUMN, ROW_COLUMN, NativeTable, NativeTables, NotNative, refusal

logger = logging.getLogger("icefloe.engine.native")

TAG_COLUMN = "__icefloe_file"  # as in IcebergSources.file_parts and sqlwrite.target_files


def tagged_table(
    natives: NativeTables, table: Table, schema: Schema, paths: Sequence[str], deletes: dict[str, FileDeletes],
    positions: bool,
) -> NativeTable | None:
    """The view of ``paths`` read as ``schema`` with ``__icefloe_file`` (and, if ``positions``,
    ``__icefloe_pos``), the ``deletes`` of each file applied; None: read through Arrow sources."""
    reason = refusal(table, schema)
    if reason is None and not paths:
        reason = "no files"  # the Arrow path's empty source has the columns' types
    if reason is None:
        io = table.io
        assert isinstance(io, ConfinedFileIO)  # refusal checked

        def tagged(indexes: list[int]) -> list[str]:
            items = [f"{_tag(indexes)} AS {TAG_COLUMN}"]
            if positions:
                items.append(f"d.{ROW_COLUMN} AS {POSITION_COLUMN}")
            return items

        try:
            selects, allowed = natives.reads(io, paths, deletes, schema, tagged)
            return NativeTable(" UNION ALL ".join(selects), tuple(dict.fromkeys(allowed)))
        except NotNative as exc:
            reason = str(exc)
    logger.debug("%s: the SQL write reads through Arrow sources: %s", table.name(), reason)
    return None


def _tag(indexes: list[int]) -> str:
    """Each row's file as its index in the statement's file list, for one ``read_parquet`` of
    the files at ``indexes`` (whose own ``file_index`` counts 0, 1, ... in that order)."""
    if len(indexes) == 1:
        return f"CAST({indexes[0]} AS BIGINT)"
    if indexes == list(range(indexes[0], indexes[0] + len(indexes))):
        return f"CAST(d.{FILE_COLUMN} AS BIGINT) + {indexes[0]}"
    listed = ", ".join(str(i) for i in indexes)
    return f"CAST([{listed}][CAST(d.{FILE_COLUMN} AS BIGINT) + 1] AS BIGINT)"
