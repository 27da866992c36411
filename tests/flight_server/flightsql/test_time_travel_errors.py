"""Time-travel and metadata-table mistakes reach the client as precise statuses whose detail
names the gRPC code, never an Arrow/Python class such as ``KeyError`` (which reads as a server
bug), and the server goes on."""

from __future__ import annotations

import adbc_driver_flightsql.dbapi as fsql
import pytest
from servers import ServerProcess

MISTAKES = [
    ("SELECT * FROM ns.t AT (VERSION => 12345)", "NOT_FOUND", "table ns.t has no snapshot 12345"),
    ("SELECT * FROM ns.t AT (VERSION => -1)", "NOT_FOUND", "table ns.t has no snapshot -1"),
    ("SELECT * FROM ns.t AT (TIMESTAMP => TIMESTAMP '2000-01-01')", "NOT_FOUND",
     "table ns.t has no snapshot at or before 2000-01-01"),
    ("SELECT * FROM ns.nope AT (VERSION => 1)", "NOT_FOUND", "table ns.nope does not exist"),
    ('SELECT * FROM ns."t$nope"', "NOT_FOUND", "does not exist"),
    ('SELECT * FROM ns."nope$snapshots"', "NOT_FOUND", "does not exist"),
    ("SELECT * FROM ns.t AT (VERSION => 'abc')", "INVALID_ARGUMENT", "AT (VERSION => ...) of ns.t"),
    ("SELECT * FROM ns.t AT (TIMESTAMP => 'junk')", "INVALID_ARGUMENT", "AT (TIMESTAMP => ...) of ns.t"),
]


def test_time_travel_mistakes_are_precise(server: ServerProcess) -> None:
    with fsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA ns")
        cur.execute("CREATE TABLE ns.t (a INT)")
        cur.execute("INSERT INTO ns.t VALUES (1)")
        for sql, code, message in MISTAKES:
            with pytest.raises(fsql.Error) as caught:
                cur.execute(sql)
                cur.fetchall()
            text = str(caught.value)
            assert text.startswith(f"{code}:") and message in text, (sql, text)
            for bug_shaped in ("KeyError", "IndexError", "AttributeError", "Traceback"):
                assert bug_shaped not in text, (sql, text)
        # NULL is no snapshot id: said as such, not as "snapshot None".
        with pytest.raises(fsql.Error, match="INVALID_ARGUMENT.*AT \\(VERSION => \\.\\.\\.\\) of ns.t is NULL"):
            cur.execute("SELECT * FROM ns.t AT (VERSION => NULL)")
        cur.execute("SELECT a FROM ns.t")
        assert cur.fetchall() == [(1,)]
