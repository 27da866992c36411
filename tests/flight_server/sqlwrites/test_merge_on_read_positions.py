"""Merge-on-read DELETE / UPDATE name their rows by position in each data file: the positions
must be exact across schema evolution (columns added, renamed, promoted), earlier deletes of
the same rows, conditions whose simple comparisons prune files, and every column type. Each
statement runs on an icefloe table and on a DuckDB native table; counts and contents must agree
after each. (A guard for any faster position reader: one was tried, see docs/deletes.md.)"""

from __future__ import annotations

from typing import Any

import duckdb
import pytest
from sqlwrites_lib import rows, update

MOR = "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read'"


def _same(conn: Any, model: duckdb.DuckDBPyConnection, table: str, columns: str) -> None:
    ours = [tuple(r.values()) for r in rows(conn, f"SELECT {columns} FROM {table} ORDER BY id")]
    theirs = model.execute(f"SELECT {columns} FROM t ORDER BY id").fetchall()
    assert ours == theirs


def _both(conn: Any, model: duckdb.DuckDBPyConnection, table: str, statement: str) -> int:
    changed = update(conn, statement.format(t=table))
    [(expected,)] = model.execute(statement.format(t="t")).fetchall()
    assert changed == expected, statement
    return changed


def test_positions_across_schema_evolution_and_earlier_deletes(conn: Any) -> None:
    update(conn, "CREATE SCHEMA morpos")
    table = "morpos.t"
    model = duckdb.connect()
    create = "CREATE TABLE {t} (id BIGINT NOT NULL, a INTEGER, f REAL, s VARCHAR, d DATE)"
    update(conn, create.format(t=table))
    model.execute(create.format(t="t"))
    update(conn, f"ALTER TABLE {table} SET ({MOR})")
    fill = ("INSERT INTO {t} SELECT i, CAST(i AS INTEGER), CAST(i / 4 AS REAL), 'r' || i, "
            "DATE '2020-01-01' + CAST(i % 365 AS INTEGER) FROM range({lo}, {hi}) r(i)")
    for lo, hi in ((0, 3000), (3000, 6000)):  # two data files
        update(conn, fill.format(t=table, lo=lo, hi=hi))
        model.execute(fill.format(t="t", lo=lo, hi=hi))
    # Files written before these changes lack ``extra`` and spell ``label`` as ``s``; ``a`` and
    # ``f`` are stored narrower than the table now reads them.
    for change in ("ADD COLUMN extra DOUBLE", "RENAME COLUMN s TO label", "ALTER COLUMN a TYPE BIGINT",
                   "ALTER COLUMN f TYPE DOUBLE"):
        update(conn, f"ALTER TABLE {table} {change}")
        model.execute(f"ALTER TABLE t {change}")
    later = ("INSERT INTO {t} SELECT i, i, i / 4, 'r' || i, DATE '2020-01-01' + CAST(i % 365 AS INTEGER), i * 0.5 "
             "FROM range(6000, 9000) r(i)")
    update(conn, later.format(t=table))
    model.execute(later.format(t="t"))

    statements = [
        # A condition part usable for pruning (BETWEEN), part applied only by the query (%).
        "DELETE FROM {t} WHERE id BETWEEN 100 AND 2500 AND id % 7 = 0",
        # Overlaps the rows deleted above: those must not be counted (or deleted) twice.
        "DELETE FROM {t} WHERE id BETWEEN 2000 AND 4000",
        "DELETE FROM {t} WHERE id % 5 = 0",
        # A promoted column in a simple comparison, a renamed one in a LIKE.
        "UPDATE {t} SET extra = a * 2, label = label || '!' WHERE a >= 5000 AND label LIKE '%1'",
        # ``extra`` is NULL in the old files: their rows match, the new file's do not.
        "DELETE FROM {t} WHERE extra IS NULL AND id > 5500",
        "UPDATE {t} SET f = f + 1 WHERE d < DATE '2020-03-01' AND id < 7000",
        # A string literal on the renamed column (old files store it by its old name).
        "DELETE FROM {t} WHERE label = 'r6011!' OR label = 'r8001'",
        "DELETE FROM {t} WHERE label IN ('r7001!', 'r7011!') AND id >= 7000",
        "DELETE FROM {t} WHERE label = 'r1501'",  # in a file written before the rename
        # The rows UPDATE wrote are in new files; updating them again deletes them there.
        "UPDATE {t} SET extra = -1 WHERE id > 8990",
        "UPDATE {t} SET extra = extra - 1 WHERE id > 8980",
    ]
    for statement in statements:
        assert _both(conn, model, table, statement) > 0, statement
        _same(conn, model, table, "id, a, round(f, 2), label, d, extra")
    # Nothing is left to delete: no commit, a zero count.
    assert _both(conn, model, table, "DELETE FROM {t} WHERE id BETWEEN 2000 AND 4000") == 0


@pytest.mark.parametrize("column", ["tm TIME", "u UUID"])
def test_positions_with_time_and_uuid_columns(conn: Any, column: str) -> None:
    """Types DuckDB's and Arrow's Parquet readers read differently."""
    name = column.split()[0]
    ns = f"morpos_{name}"
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id BIGINT NOT NULL, {column})")
    update(conn, f"ALTER TABLE {ns}.t SET ({MOR})")
    value = "TIME '01:02:03'" if name == "tm" else "uuid()"
    update(conn, f"INSERT INTO {ns}.t SELECT i, {value} FROM range(0, 100) r(i)")
    assert update(conn, f"DELETE FROM {ns}.t WHERE id < 10") == 10
    assert update(conn, f"DELETE FROM {ns}.t WHERE id < 20") == 10
    assert update(conn, f"UPDATE {ns}.t SET id = id + 1000 WHERE id >= 90") == 10
    got = [r["id"] for r in rows(conn, f"SELECT id FROM {ns}.t ORDER BY id")]
    assert got == [*range(20, 90), *range(1090, 1100)]
