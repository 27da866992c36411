"""The JVM connector's jar (built once per source change by scripts/build-spark-connector) and a
Spark session that has it on spark.jars next to the Python data source."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "pyspark_icefloe"))
sys.path.insert(0, str(ROOT / "tests" / "flight_server" / "security"))

FORMAT = "icefloe-flight"


def missing_tools() -> str | None:
    """Why the connector cannot be built or run here, or None."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the JVM Spark connector needs a JDK and Maven to build"
    return None


@functools.cache
def connector_jar() -> str:
    """The jar's path (built by the project script on the first call, cached by source hash)."""
    done = subprocess.run([str(ROOT / "scripts" / "build-spark-connector")], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError("scripts/build-spark-connector failed:\n" + done.stderr[-4000:])
    last = done.stdout.strip().splitlines()[-1]
    fields = dict(part.split("=", 1) for part in last.split())
    assert fields["FORMAT"] == FORMAT, last
    return fields["JAR"]


def jvm_session(master: str = "local[2]", conf: dict[str, str] | None = None) -> Any:
    """A local Spark session with the connector jar (and the Python source registered too)."""
    from spark_support import make_session

    return make_session(master=master, conf={"spark.jars": connector_jar(), **(conf or {})})


def plan_text(spark: Any, frame: Any) -> str:
    """Every plan of ``frame`` as EXPLAIN prints them (extended and formatted)."""
    execution = frame._jdf.queryExecution()
    return str(execution.toString()) + "".join(
        spark._jvm.PythonSQLUtils.explainString(execution, mode) for mode in ("extended", "formatted"))
