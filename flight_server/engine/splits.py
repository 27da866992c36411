"""Split scans: one query over one table answered by several endpoints.

A query is split only when the union of its results over disjoint groups of the table's data
files is its result: a projection and filter of one table, with no aggregate, window, DISTINCT,
ORDER BY, LIMIT, subquery or CTE (the test runs on DuckDB's parse tree). The snapshot's data
files (after manifest pruning) are dealt into ``n`` groups balanced by bytes, deterministically,
so an endpoint's ticket only says "part k of n" and any server recomputes the same group from
the pinned snapshot's manifests: tickets stay stateless and small.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import duckdb

DEFAULT_TARGET_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_PARTITIONS = 64


@functools.cache
def _aggregates() -> frozenset[str]:
    """Names DuckDB knows as aggregate (or window-only) functions."""
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
            "WHERE function_type IN ('aggregate', 'window')"
        ).fetchall()
    finally:
        con.close()
    return frozenset(r[0] for r in rows)


def splittable(statement: dict[str, Any] | None) -> bool:
    """Whether the query (DuckDB's serialized tree) is row-wise over a single base table."""
    if statement is None:
        return False
    node = statement.get("node") or {}
    if node.get("type") != "SELECT_NODE" or (node.get("from_table") or {}).get("type") != "BASE_TABLE":
        return False
    if node.get("modifiers") or node.get("group_expressions") or node.get("group_sets"):
        return False
    if node.get("having") or node.get("qualify") or node.get("sample") or (node.get("cte_map") or {}).get("map"):
        return False
    if node.get("aggregate_handling") not in (None, "STANDARD_HANDLING"):
        return False
    return _row_wise(node.get("select_list")) and _row_wise(node.get("where_clause"))


def _row_wise(expr: Any) -> bool:
    if isinstance(expr, list):
        return all(_row_wise(e) for e in expr)
    if not isinstance(expr, dict):
        return True
    cls = expr.get("class")
    if cls in ("WINDOW", "SUBQUERY"):
        return False
    if cls == "FUNCTION" and (str(expr.get("function_name", "")).lower() in _aggregates() or expr.get("distinct")):
        return False
    return all(_row_wise(v) for v in expr.values() if isinstance(v, (dict, list)))


@dataclass(frozen=True)
class ScanUnit:
    """The smallest piece a split scan deals out: a whole data file, or one row group of a
    file that has several (Iceberg's ``split_offsets`` give their byte ranges from the
    manifest, so planning opens no data file)."""

    path: str
    bytes: int
    row_group: int | None = None  # None: the whole file
    row_groups: int = 1  # how many row groups the manifest says the file has


def scan_units(files: list[tuple[str, int, tuple[int, ...]]]) -> list[ScanUnit]:
    """Units of ``(path, size, split_offsets)`` files: one per row group where a file lists
    several, else one per file. Depends on the files only, so every server derives the same."""
    units: list[ScanUnit] = []
    for path, size, offsets in files:
        bounds = sorted(offsets)
        if len(bounds) < 2 or bounds[0] < 0 or bounds[-1] >= size:
            units.append(ScanUnit(path, size))
            continue
        ends = [*bounds[1:], size]
        units.extend(ScanUnit(path, max(end - start, 1), i, len(bounds))
                     for i, (start, end) in enumerate(zip(bounds, ends, strict=True)))
    return units


def partition_count(total_bytes: int, files: int, target_bytes: int, max_partitions: int) -> int:
    """How many endpoints a scan of ``files`` units (data files or row groups) holding
    ``total_bytes`` gets."""
    if files <= 1 or max_partitions <= 1:
        return 1
    return max(1, min(files, max_partitions, math.ceil(total_bytes / max(target_bytes, 1))))


def assign(sizes: list[int], n: int) -> list[int]:
    """The part (0..n-1) of each file: largest first onto the lightest part (ties: lowest part,
    then earliest file), the same for the same list on every server."""
    loads = [0] * n
    parts = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        part = min(range(n), key=lambda k: (loads[k], k))
        parts[index] = part
        loads[part] += sizes[index]
    return parts
