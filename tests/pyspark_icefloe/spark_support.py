"""Helpers for the Spark data source tests: sessions, tables and appends through the real server."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

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


def make_session(remote: bool = False) -> Any:
    """A local[2] session (classic, or Spark Connect with ``remote``) with both formats registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pyspark_icefloe import register

    builder = SparkSession.builder.remote("local[2]") if remote else SparkSession.builder.master("local[2]")
    for key, value in spark_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session


def do_put(location: str, table: str, data: pa.Table) -> dict[str, Any]:
    """A plain DoPut append; returns the server's commit JSON."""
    namespace, _, name = table.rpartition(".")
    client = flight.FlightClient(location)
    try:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(namespace, name), data.schema)
        writer.write_table(data)
        writer.done_writing()
        buf = reader.read()
        writer.close()
        assert buf is not None
        result: dict[str, Any] = json.loads(buf.to_pybytes())
        return result
    finally:
        client.close()


def sql(location: str, statement: str) -> pa.Table:
    """Run one statement with ADBC and return its result (empty for writes)."""
    import adbc_driver_flightsql.dbapi as flight_sql

    with flight_sql.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)
        try:
            return cur.fetch_arrow_table()
        except Exception:  # a write has no result set
            return pa.table({})
