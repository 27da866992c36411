"""A data file's deleted rows, in the shapes a DuckDB scan applies them (``native_tables``,
``native_writes``): a filter on row numbers, a table of positions, a BIT string per file, a
flag per row. Pure functions of sorted position arrays; nothing here reads a file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from catalog.deletes import distinct_sorted

# The virtual column of a row's position in its file (``read_parquet(..., file_row_number = true)``).
ROW_COLUMN = "file_row_number"
# A data file's deleted positions that form at most this many runs of consecutive rows are a
# filter DuckDB pushes into its scan (NOT BETWEEN per run): no join, no delete file read.
_RANGE_FILTER_RUNS = 32
# The one column of a kept table of flags (``kept_mask``): true where the row is kept.
MASK_COLUMN = "keep"


def kept_mask(positions: np.ndarray, rows: int) -> pa.Table:
    """(r, keep) for each of a file's ``rows`` rows: its number, and false where deleted. The
    slot orders the kept table by ``r``, as the POSITIONAL JOIN lines it up with the file's rows."""
    keep = np.ones(rows, dtype=np.bool_)
    # A position past the file's rows names no row (as the anti-join it replaces ignored it).
    keep[positions[(positions >= 0) & (positions < rows)]] = False
    return pa.table({"r": np.arange(rows, dtype=np.int64), MASK_COLUMN: keep})


def deleted_bits(arrays: Sequence[np.ndarray], rows: Sequence[int]) -> pa.Table:
    """(i UBIGINT as DuckDB's ``file_index``, b: '0'/'1' per row, '1' deleted), one row per file;
    the slot casts ``b`` to BIT when it keeps the table."""
    bits = []
    for positions, n in zip(arrays, rows, strict=True):
        chars = np.full(n, ord("0"), dtype=np.uint8)
        # A position past the file's rows names no row (as the anti-join it replaces ignored it).
        chars[positions[(positions >= 0) & (positions < n)]] = ord("1")
        bits.append(chars.tobytes().decode("ascii"))
    return pa.table({"i": pa.array(range(len(bits)), pa.uint64()), "b": pa.array(bits, pa.large_string())})


def positions_table(arrays: Sequence[np.ndarray]) -> pa.Table:
    """(i, pos): each array's positions with its index. ``i`` is UBIGINT as DuckDB's
    ``file_index`` is, so the join compares the columns as they are (a BIGINT ``i`` made DuckDB
    cast both sides to HUGEINT)."""
    i = np.repeat(np.arange(len(arrays), dtype=np.uint64), [len(a) for a in arrays])
    pos = np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.empty(0, np.int64)
    return pa.table({"i": i, "pos": pos})


def range_predicate(arrays: Sequence[np.ndarray]) -> str | None:
    """A filter on ``d.file_row_number`` keeping every row but the positions of ``arrays``
    (each sorted and distinct, as ``DeleteSets.position_arrays`` gives them; others are sorted here): ``""`` for none,
    None when they form more than ``_RANGE_FILTER_RUNS`` runs.

    Runs are found per array and then merged, with no sort of every position: a clustered
    merge-on-read DELETE adds one array of 100k positions per statement, and sorting them all
    again at each statement was most of the filter's cost."""
    starts, ends = [], []
    for positions in arrays:
        if not len(positions):
            continue
        steps = np.diff(positions)
        if len(steps) and steps.min() <= 0:  # not sorted and distinct after all: make it so
            positions = distinct_sorted(positions)
            steps = np.diff(positions)
        breaks = np.flatnonzero(steps != 1)
        if len(breaks) >= 4 * _RANGE_FILTER_RUNS:  # too many gaps for the other arrays to fill
            return None
        starts.append(positions[np.concatenate(([0], breaks + 1))])
        ends.append(positions[np.concatenate((breaks, [len(positions) - 1]))])
    if not starts:
        return ""
    runs: list[list[int]] = []
    for a, b in sorted(zip(np.concatenate(starts).tolist(), np.concatenate(ends).tolist(), strict=True)):
        if runs and a <= runs[-1][1] + 1:  # touching or overlapping runs of two delete files
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    if len(runs) > _RANGE_FILTER_RUNS:
        return None
    return " AND ".join(
        f"d.{ROW_COLUMN} <> {a}" if a == b else f"d.{ROW_COLUMN} NOT BETWEEN {a} AND {b}" for a, b in runs
    )
