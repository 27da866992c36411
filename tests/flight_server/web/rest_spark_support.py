"""A local Spark session (local[2]) with Iceberg's own Spark runtime, talking to icefloe's REST
catalog. The runtime jar comes from Maven Central via ``scripts/fetch-iceberg-spark``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
ICEBERG_VERSION = "1.12.0"
JAR_NAME = f"iceberg-spark-runtime-4.1_2.13-{ICEBERG_VERSION}.jar"


def skip_reason() -> str | None:
    """Why Spark tests cannot run here, or None."""
    if shutil.which("java") is None:
        return "Spark needs Java (no java on PATH)"
    return None


def runtime_jar() -> Path:
    """The Iceberg Spark runtime jar, fetched once into ~/.cache/icefloe/iceberg-spark/."""
    given = os.environ.get("ICEFLOE_ICEBERG_SPARK_JAR")
    if given:
        return Path(given)
    jar = Path.home() / ".cache" / "icefloe" / "iceberg-spark" / JAR_NAME
    if not jar.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch-iceberg-spark")], check=True, timeout=600)
    return jar


def aws_bundle_jar() -> Path:
    """Iceberg's AWS bundle (S3FileIO), fetched with the runtime by scripts/fetch-iceberg-spark."""
    jar = Path.home() / ".cache" / "icefloe" / "iceberg-spark" / f"iceberg-aws-bundle-{ICEBERG_VERSION}.jar"
    if not jar.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch-iceberg-spark")], check=True, timeout=600)
    return jar


def spark_session(rest_uri: str, warehouse: str, catalog: str = "ice", aws: bool = False, **extra: str) -> Any:
    """One Spark session whose catalog ``catalog`` is icefloe's REST endpoint (with Iceberg's
    AWS bundle too when ``aws``: an S3 warehouse)."""
    from pyspark.sql import SparkSession

    jars = [str(runtime_jar()), *([str(aws_bundle_jar())] if aws else [])]
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("icefloe-rest-tests")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{catalog}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{catalog}.type", "rest")
        .config(f"spark.sql.catalog.{catalog}.uri", rest_uri)
        .config(f"spark.sql.catalog.{catalog}.warehouse", warehouse)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
    )
    for key, value in extra.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
