"""icefloe's Spark data source (pyspark 4.1+ Python Data Source API; no JARs).

    from pyspark_icefloe import register
    register(spark)                       # or spark.dataSource.register(DefaultSource)
    spark.read.format("icefloe").option("uri", "grpc://127.0.0.1:31337").option("table", "ns.t").load()

``DefaultSource`` is the ``icefloe`` format; ``IcefloeCommitsDataSource`` is ``icefloe-commits``.
"""

from __future__ import annotations

from typing import Any

from pyspark_icefloe.source import IcefloeCommitsDataSource, IcefloeDataSource

DefaultSource = IcefloeDataSource

__all__ = ["DefaultSource", "IcefloeCommitsDataSource", "IcefloeDataSource", "register"]


def register(spark: Any) -> None:
    """Register both formats with a SparkSession (classic or Spark Connect)."""
    spark.dataSource.register(IcefloeDataSource)
    spark.dataSource.register(IcefloeCommitsDataSource)
