"""An empty or whitespace-only namespace is a bad name to clients (INVALID_ARGUMENT), although
the catalog raises pyiceberg's NoSuchNamespaceError for it (EmptyNamespaceError is both)."""

from __future__ import annotations

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pytest
from doput_client import do_put
from servers import ServerProcess


def test_empty_namespace_is_invalid_argument_everywhere(server: ServerProcess) -> None:
    with fsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        with pytest.raises(fsql.Error, match="INVALID_ARGUMENT.*empty or whitespace-only"):
            cur.execute('CREATE SCHEMA " "')
        with pytest.raises(fsql.Error, match="INVALID_ARGUMENT.*empty or whitespace-only"):
            cur.adbc_ingest("t", pa.table({"a": [1]}), mode="create", db_schema_name=" ")
        cur.execute("SELECT 1")  # the server goes on
        assert cur.fetchall() == [(1,)]
    with pytest.raises(pa.ArrowInvalid, match="empty or whitespace-only"):
        do_put(server.location, (" ", "t"), pa.table({"a": [1]}))
