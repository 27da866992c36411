"""Helpers for the REST catalog tests: a server with ``--rest-port 0``, its URL, SQL over
Flight SQL, and the commit log read the way another process may read it (read-only)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from adbc_driver_flightsql import dbapi as flightsql

from catalog import RocksCatalog
from catalog.commit_log import CommitRecord
from tests.servers import ServerProcess

REST_LINE = re.compile(r"icefloe REST catalog on (https?://\S+)")


def rest_url(server: ServerProcess) -> str:
    match = REST_LINE.search(server.log)
    assert match, server.log
    return match.group(1)


@contextmanager
def rest_server(warehouse: Path, extra: list[str] | None = None) -> Iterator[ServerProcess]:
    server = ServerProcess(warehouse, ["--rest-port", "0", *(extra or [])]).start()
    try:
        yield server
    finally:
        server.stop()


def sql(location: str, query: str, **db_kwargs: Any) -> pa.Table:
    """Run one query over Flight SQL (ADBC) and return its result."""
    with flightsql.connect(location, db_kwargs=db_kwargs, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetch_arrow_table()


def commit_records(warehouse: Path, after: int = 0) -> list[CommitRecord]:
    """The commit log as a second process sees it while the server holds the warehouse."""
    reader = RocksCatalog("reader", warehouse=str(warehouse), **{"read-only": "true"})
    try:
        return list(reader.log.read(after))
    finally:
        reader.close()


def head_seq(warehouse: Path) -> int:
    reader = RocksCatalog("reader", warehouse=str(warehouse), **{"read-only": "true"})
    try:
        return reader.log.head()
    finally:
        reader.close()
