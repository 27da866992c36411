"""Real local Spark (local[2]) against a real icefloe server, one Spark session per test module."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The certificates and users of the security tests (security_support).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flight_server" / "security"))

from spark_support import make_session  # noqa: E402

JAVA = shutil.which("java")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if JAVA is None:
        skip = pytest.mark.skip(reason="java is not installed: the Spark data source tests need a JVM")
        for item in items:
            if "pyspark_icefloe" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_session()
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _python_for_spark() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
