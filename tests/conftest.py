from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import ServerProcess  # noqa: E402

# The warehouse of a test: a local folder, or (for modules that ask: ON_EVERY_STORAGE) an S3 prefix.
from storage_kinds import Warehouse, start_server, storage_kind, warehouse  # noqa: E402, F401


@pytest.fixture
def server(warehouse: Warehouse) -> Iterator[ServerProcess]:  # noqa: F811  # the fixture imported above
    """A real icefloe server on a free port over a fresh warehouse."""
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


# The real PostgreSQL server of the CDC connector's tests (one cluster per run), and the real
# S3 server's fixtures (s3_server, s3_warehouse), for every test folder.
from postgres_support import postgres  # noqa: E402, F401
from s3_support import s3_server, s3_warehouse  # noqa: E402, F401


@pytest.fixture(autouse=True, scope="module")
def _spark_jvm_per_module() -> Iterator[None]:
    """Stop this process's Spark JVM after a module that started one.

    A JVM's driver classpath is fixed when it starts: a later module's ``spark.jars`` (Iceberg's
    runtime, its AWS bundle, the JVM connector) would otherwise never reach the driver, and which
    module happened to run first would decide which Spark tests can load their classes. Every
    Spark session here is module-scoped, so each module gets a JVM with its own jars.
    """
    yield
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    if process is not None:  # the JVM exits when its stdin closes (PythonGatewayServer)
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=60)
        except Exception:
            process.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None
