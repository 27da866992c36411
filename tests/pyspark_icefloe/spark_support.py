"""Helpers for the Spark data source tests: sessions, tables and appends through the real server."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from storage_kinds import Warehouse

QUIET_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def spark_conf() -> dict[str, str]:
    log4j = Path(tempfile.gettempdir()) / "icefloe-spark-log4j2.properties"
    log4j.write_text(QUIET_LOG4J)
    java_opts = f"-Dlog4j.configurationFile=file:{log4j}"
    return {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
    }


def make_session(remote: bool = False, master: str = "local[2]", conf: dict[str, str] | None = None) -> Any:
    """A local[2] session (classic, or Spark Connect with ``remote``) with both formats registered;
    ``local[2,3]`` retries a failed task up to twice; ``conf`` adds settings."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pyspark_icefloe import register

    builder = SparkSession.builder.remote(master) if remote else SparkSession.builder.master(master)
    for key, value in {**spark_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session


def do_put(location: str, table: str, data: pa.Table) -> dict[str, Any]:
    """A plain DoPut append of ``data`` to ``ns.t``; returns the server's commit JSON."""
    from doput_client import do_put as put

    namespace, _, name = table.rpartition(".")
    return put(location, (namespace, name), data)


def sql(location: str, statement: str) -> pa.Table:
    """Run one statement with ADBC and return its result (empty for writes)."""
    import adbc_driver_flightsql.dbapi as flight_sql

    with flight_sql.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)
        try:
            return cur.fetch_arrow_table()
        except Exception:  # a write has no result set
            return pa.table({})


XS_SCHEMA = pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())])


@contextmanager
def serving_tables(warehouse: Warehouse, tables: Sequence[str], schema: pa.Schema = XS_SCHEMA) -> Iterator[Any]:
    """A real server on a new warehouse (a local folder or an S3 prefix) holding empty ``tables``
    (namespace ``ns``)."""
    # Imported here: the docs' Spark example imports this module with only its own folder on
    # sys.path (storage_kinds lives in tests/).
    from storage_kinds import open_catalog, start_server

    cat = open_catalog(warehouse, "setup")
    try:
        cat.create_namespace("ns")
        for name in tables:
            cat.create_table(name, schema)
    finally:
        cat.close()
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
