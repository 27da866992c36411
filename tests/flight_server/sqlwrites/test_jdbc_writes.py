"""SQL writes through the stock Arrow Flight SQL JDBC driver (what DBeaver uses).

Reuses the flightsql tests' harness: the Java program is compiled with javac at test time and
run with the driver jar from ``.cache/jdbc/`` (``scripts/fetch-jdbc``) or ``$ICEFLOE_JDBC_JAR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jdbc_support import run_java_program
from servers import ServerProcess
from sqlwrites_lib import log_records

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def jdbc(write_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    port = write_server.location.rsplit(":", 1)[1]
    url = f"jdbc:arrow-flight-sql://127.0.0.1:{port}?useEncryption=false"
    proc = run_java_program(HERE / "jdbc" / "JdbcWrites.java", tmp_path_factory.mktemp("jdbc_writes"), [url], 240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CHECK "):
            _, name, *value = line.split(" ", 2)
            checks[name] = value[0] if value else ""
    return checks


def test_update_counts(jdbc: dict[str, str]) -> None:
    assert jdbc["create_schema"] == "0" and jdbc["create_table"] == "0"
    assert jdbc["insert_values"] == "2"
    assert jdbc["prepared_insert"] == "1"
    assert jdbc["batch_insert"] == "2"
    assert jdbc["insert_select"] == "2"
    assert jdbc["update"] == "2"
    assert jdbc["prepared_delete"] == "1"
    assert jdbc["delete"] == "1"
    assert jdbc["ctas"] == "2"
    assert jdbc["truncate"] == "2"


def test_rows_after_writes(jdbc: dict[str, str]) -> None:
    assert jdbc["rows"] == "[1,ann,9.99, 2,bob,2.25, 3,cy,9.99, 4,dee,null, 5,eve,null]"
    assert jdbc["copy_rows"] == "[1,ann, 2,bob]"  # after ADD / RENAME COLUMN / DROP COLUMN / RENAME TO
    assert jdbc["copy_count"] == "[0]"


def test_history_through_jdbc(jdbc: dict[str, str]) -> None:
    # UPDATE and the prepared DELETE rewrite part of a file (overwrite); the last DELETE drops a whole file.
    # The two-row batch is one append.
    assert jdbc["snapshot_ops"] == "[append, append, append, append, overwrite, overwrite, delete]"
    assert jdbc["time_travel"] == "[1, 2]"
    assert jdbc["files"] == "[5]"
    assert jdbc["history_len"] == "[7]"


def test_errors_are_clean_and_change_nothing(jdbc: dict[str, str]) -> None:
    assert "column id is NOT NULL" in jdbc["err_not_null"]
    assert "jdbc.nope does not exist" in jdbc["err_missing"]
    assert "jdbc.t already exists" in jdbc["err_exists"]
    assert "jdbc is not empty" in jdbc["err_schema_not_empty"]
    for name in ("err_not_null", "err_missing", "err_exists", "err_schema_not_empty"):
        assert "Traceback" not in jdbc[name] and ".py" not in jdbc[name]
    assert jdbc["count_after_errors"] == "[5]"
    assert jdbc["drop_cascade"] == "0"


def test_jdbc_commits_are_in_the_log(jdbc: dict[str, str], reader_catalog: Any) -> None:
    records = [r for r in log_records(reader_catalog, 0) if r.namespace == ("jdbc",)]
    assert [r.extra["sql"] for r in records if r.table == "t"][:2] == [
        "CREATE TABLE jdbc.t (id BIGINT NOT NULL, name VARCHAR, amount DECIMAL(10, 2), day DATE)",
        "INSERT INTO jdbc.t VALUES (1, 'ann', 1.50, DATE '2024-01-01'), (2, 'bob', 2.25, NULL)",
    ]
