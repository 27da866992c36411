"""The stock Arrow Flight SQL JDBC driver (what DBeaver uses) against a real server.

The Java program is compiled with javac at test time and run with the driver jar that
``scripts/fetch-jdbc`` puts in ``.cache/jdbc/`` (or ``$ICEFLOE_JDBC_JAR``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jdbc_support import run_java_program
from servers import ServerProcess

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def jdbc_output(sample_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    port = sample_server.location.rsplit(":", 1)[1]
    url = f"jdbc:arrow-flight-sql://127.0.0.1:{port}?useEncryption=false"
    proc = run_java_program(HERE / "jdbc" / "JdbcCheck.java", tmp_path_factory.mktemp("jdbc"), [url])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CHECK "):
            _, name, value = line.split(" ", 2)
            checks[name] = value
    return checks


def test_metadata(jdbc_output: dict[str, str]) -> None:
    assert jdbc_output["product"] == "icefloe"
    assert jdbc_output["catalogs"] == "[icefloe]"
    assert jdbc_output["schemas"] == "[analytics, analytics.daily, default, sales]"
    assert jdbc_output["schemas_sales"] == "[sales]"
    assert jdbc_output["tables_sales"] == "[empty, evolved, orders]"
    assert jdbc_output["tables_typed"] == "[orders]"
    assert jdbc_output["columns_orders"] == "[id, customer, amount]"
    assert jdbc_output["table_types"] == "[TABLE, VIEW]"  # views are served (DESIGN.md: TABLE plus VIEW)
    assert jdbc_output["tables_multilevel"] == "[visits]"
    assert jdbc_output["tables_all"] == "[visits, empty, evolved, orders]"
    assert jdbc_output["column_types_evolved"] == "[a, label, c]"
    assert jdbc_output["column_types"] == "[BIGINT, VARCHAR, DOUBLE]", jdbc_output["column_types"]
    assert jdbc_output["primary_keys"] == "[]"
    assert jdbc_output["imported_keys"] == "[]"


def test_statements(jdbc_output: dict[str, str]) -> None:
    assert jdbc_output["query_columns"] == "2:id,customer"
    assert jdbc_output["query_customers"] == "[ann, bob, cy, dee]"
    assert jdbc_output["execute_is_query"] == "true"
    assert jdbc_output["answer"] == "42"


def test_result_set_metadata_names_the_source_column(jdbc_output: dict[str, str]) -> None:
    """JDBC's ResultSetMetaData reads the ARROW:FLIGHT:SQL:* keys of the query's result schema."""
    assert jdbc_output["rsmd_1"] == "icefloe|sales|orders|BIGINT|false|false", jdbc_output["rsmd_1"]
    assert jdbc_output["rsmd_2"] == "icefloe|sales|orders|VARCHAR|false|false", jdbc_output["rsmd_2"]
    # a plain column keeps its origin; an aggregate has none
    assert jdbc_output["rsmd_grouped"] == "orders|sales|null|null", jdbc_output["rsmd_grouped"]


def test_prepared_statements_with_parameters(jdbc_output: dict[str, str]) -> None:
    assert jdbc_output["prepared_2"] == "[bob]"
    assert jdbc_output["prepared_3"] == "[cy]"
    assert jdbc_output["prepared_mixed"] == "3,hi!"


def test_errors_are_clean(jdbc_output: dict[str, str]) -> None:
    # Both writes are refused (wrong column count; missing table), so the sample data is unchanged.
    assert "has 3 columns but 2 values" in jdbc_output["update_error"], jdbc_output["update_error"]
    assert "sales.nosuch does not exist" in jdbc_output["prepared_update_error"], jdbc_output["prepared_update_error"]
    assert "syntax error" in jdbc_output["bad_sql_error"]
    for name in ("update_error", "prepared_update_error", "bad_sql_error"):
        assert "Traceback" not in jdbc_output[name] and ".py" not in jdbc_output[name]
    assert jdbc_output["count_after_errors"] == "4"
