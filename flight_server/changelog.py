"""The changelog of one copy-on-write commit: which rows it deleted and which it inserted.

An Iceberg ``overwrite`` or ``delete`` snapshot written copy-on-write removes whole data files
and adds files holding the rows that survive (plus, for an update, the new rows). Reading
"all rows of the removed files" as deletes and "all rows of the added files" as inserts would
report every surviving row as a delete and an insert of itself (a carry-over). As in Iceberg's
Spark changelog view, carry-overs are removed: a row value deleted k times and inserted m
times in one commit is reported as max(k - m, 0) deletes and max(m - k, 0) inserts.

The matching runs in a private in-memory DuckDB (no file access) over row indices only: the
rows sent are ``take``n from the Arrow tables as read, so no value goes through a type
conversion.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

# Helper column names (a table column of the same name would only make the query fail).
_ROW, _RANK, _COUNT = "__icefloe_row", "__icefloe_rank", "__icefloe_count"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def net_changes(deleted: pa.Table, inserted: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows of ``deleted`` and ``inserted`` left after carry-overs cancel out.

    Both tables have the same columns. Rows compare by value over every column (NULL equals
    NULL); within equal rows the earlier ones (by position) are kept.
    """
    if deleted.num_rows == 0 or inserted.num_rows == 0:
        return deleted, inserted
    return _unmatched(deleted, inserted), _unmatched(inserted, deleted)


def _unmatched(rows: pa.Table, others: pa.Table) -> pa.Table:
    names = rows.column_names
    columns = ", ".join(_quoted(n) for n in names)
    matches = " AND ".join(f"r.{_quoted(n)} IS NOT DISTINCT FROM o.{_quoted(n)}" for n in names)
    sql = (
        f"WITH r AS (SELECT {_ROW}, row_number() OVER (PARTITION BY {columns} ORDER BY {_ROW}) AS {_RANK}, "
        f"{columns} FROM rows_in), "
        f"o AS (SELECT {columns}, count(*) AS {_COUNT} FROM others_in GROUP BY ALL) "
        f"SELECT r.{_ROW} FROM r LEFT JOIN o ON {matches} "
        f"WHERE o.{_COUNT} IS NULL OR r.{_RANK} > o.{_COUNT} ORDER BY r.{_ROW}"
    )
    connection = duckdb.connect(":memory:", config={"enable_external_access": "false", "threads": "1"})
    try:
        connection.register("rows_in", rows.append_column(_ROW, pa.array(range(rows.num_rows), pa.int64())))
        connection.register("others_in", others)
        keep = connection.sql(sql).to_arrow_table().column(0)
    finally:
        connection.close()
    return rows.take(keep)
