"""Iceberg-Java's own ``RESTCatalog`` (from Iceberg's Spark runtime jar, no Spark session)
against icefloe: the error types and wording it matches on, and views end to end (create,
load, replace, rename, list, exists, drop). The Java side is ``java/IcebergRestViews.java``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.flight_server.web.rest_spark_support import runtime_jar
from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url
from tests.servers import ServerProcess

SOURCE = Path(__file__).parent / "java" / "IcebergRestViews.java"

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None,
                                reason="needs a JDK (java and javac)")


def _classpath() -> str:
    import pyspark  # its jars: Iceberg's runtime needs Hadoop's client classes for local files

    jars = Path(pyspark.__file__).parent / "jars"
    return f"{runtime_jar()}{os.pathsep}{jars}/*"


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], ServerProcess]]:
    folder = tmp_path_factory.mktemp("java")
    classes = folder / "classes"
    classpath = _classpath()
    subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(SOURCE)], check=True, timeout=180)
    with rest_server(folder / "wh") as server:
        run = subprocess.run(
            ["java", "-cp", f"{classpath}{os.pathsep}{classes}", SOURCE.stem, rest_url(server), str(server.warehouse)],
            capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        lines = [line.split("=", 1) for line in run.stdout.splitlines() if "=" in line]
        yield {key: value for key, value in lines}, server


def test_errors_are_the_types_and_words_iceberg_java_expects(answers: tuple[dict[str, str], ServerProcess]) -> None:
    got, _ = answers
    assert got["namespace_exists"] == "AlreadyExistsException: Namespace already exists: jv"
    assert got["table_exists"] == "AlreadyExistsException: Table already exists: jv.t"
    # The second handle's commit is refused with Java's wording (Java's client checks the
    # last assigned field id first, and prefixes "Commit failed: " itself).
    assert got["stale_schema"] == ("CommitFailedException: Commit failed: Requirement failed: last assigned field id "
                                   "changed: expected id 1 != 2")


def test_views_end_to_end(answers: tuple[dict[str, str], ServerProcess]) -> None:
    got, server = answers
    assert got["view_created"] == "1"
    assert got["view_exists"] == "true" and got["views"] == "[jv.v]"
    assert got["view_replaced"] == "2 SELECT id FROM jv.t WHERE id > 1"
    assert got["view_renamed"] == "false true"
    assert got["loaded_sql"] == "SELECT id FROM jv.t WHERE id > 1"
    assert got["view_exists_error"] == "AlreadyExistsException: View already exists: jv.w"
    assert got["view_dropped"] == "true false"
    assert got["missing_view"] == "NoSuchViewException: View does not exist: jv.w"
    operations = [r.operation for r in commit_records(server.warehouse) if r.table in ("v", "w")]
    assert operations == ["view-create", "view-replace", "view-rename", "view-drop"]
