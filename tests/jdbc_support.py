"""Locating and running the stock Arrow Flight SQL JDBC driver for the JDBC tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from servers import ROOT

# Java 17+ needs this for Arrow's memory module.
JAVA_OPENS = "--add-opens=java.base/java.nio=ALL-UNNAMED"


def driver_jar() -> Path | None:
    """$ICEFLOE_JDBC_JAR, or the newest jar scripts/fetch-jdbc put in .cache/jdbc/."""
    env = os.environ.get("ICEFLOE_JDBC_JAR")
    if env and Path(env).is_file():
        return Path(env)
    jars = sorted((ROOT / ".cache" / "jdbc").glob("flight-sql-jdbc-driver-*.jar"))
    return jars[-1] if jars else None


def driver_jar_or_skip(need_javac: bool = True) -> Path:
    """The driver jar; skips the test with the reason when Java or the jar is missing."""
    tools = ("java", "javac") if need_javac else ("java",)
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{'/'.join(missing)} not installed: the JDBC driver cannot run here")
    jar = driver_jar()
    if jar is None:
        pytest.skip("Flight SQL JDBC driver jar missing: run scripts/fetch-jdbc (needs Maven) or set ICEFLOE_JDBC_JAR")
    return jar


def run_java_program(
    source: Path, classes: Path, args: list[str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Compile ``source`` into ``classes`` and run its main class with the driver on the classpath."""
    jar = driver_jar_or_skip()
    subprocess.run(["javac", "-d", str(classes), str(source)], check=True, timeout=120)
    return subprocess.run(
        ["java", JAVA_OPENS, "-cp", f"{jar}{os.pathsep}{classes}", source.stem, *args],
        capture_output=True, text=True, timeout=timeout,
    )
