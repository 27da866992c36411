"""Helpers for the SQL write tests (ADBC statements, results, the commit log head)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

# The key SQL-write cases run on both storages, each storage with its own module server
# (conftest's ``write_storage``); not every test, for CI time.
ON_BOTH_STORAGES = pytest.mark.parametrize("write_storage", ["local", "s3"], indirect=True)


def sql(conn: Any, text: str, parameters: Any = None) -> pa.Table:
    """Run one statement; returns its result (a write returns its one-row ``count``)."""
    with conn.cursor() as cur:
        cur.execute(text, parameters)
        return cur.fetch_arrow_table()


def update(conn: Any, text: str, parameters: Any = None) -> int:
    """Run a write through ADBC's update path (Flight SQL CommandStatementUpdate); its rowcount."""
    with conn.cursor() as cur:
        if parameters is None:
            return _execute_update(cur, text)
        cur.executemany(text, [parameters])
        return int(cur.rowcount)


def _execute_update(cur: Any, text: str) -> int:
    cur.adbc_statement.set_sql_query(text)
    return int(cur.adbc_statement.execute_update())


def rows(conn: Any, text: str) -> list[dict[str, Any]]:
    return sql(conn, text).to_pylist()


def scalar(conn: Any, text: str) -> Any:
    table = sql(conn, text)
    assert table.num_rows == 1 and table.num_columns == 1, table
    return table.column(0)[0].as_py()


def log_head(catalog: Any) -> int:
    """The catalog's commit sequence head as the reader catalog sees it now."""
    catalog.store.refresh()
    return int(catalog.log.head())


def log_records(catalog: Any, after: int) -> list[Any]:
    """Commit-log records after ``after``, as the reader catalog sees them now."""
    catalog.store.refresh()
    return list(catalog.log.read(after))


def execute_rowcount(conn: Any, text: str, parameters: Any = None) -> int:
    """Run a write with ADBC ``cursor.execute`` (the query path); its rowcount."""
    with conn.cursor() as cur:
        cur.execute(text, parameters)
        return int(cur.rowcount)
