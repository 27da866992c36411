"""Every TPC-H answer over Flight SQL equals DuckDB's on the same data (scale factor 0.01).

The data is ``tpchgen-cli``'s (its string columns are ``string_view``), ingested with ADBC
``adbc_ingest`` as a client would; DuckDB in this process reads the generated files directly.
The queries are the benchmark's (``benchmarks/tpch_queries.py``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from adbc_driver_flightsql import dbapi as flightsql
from servers import ROOT, ServerProcess

sys.path.insert(0, str(ROOT / "benchmarks"))
from tpch_queries import NUMBERS, TABLES, query, rows_of, same_answer  # noqa: E402


def _tpchgen() -> str | None:
    found = shutil.which("tpchgen-cli")
    beside = Path(sys.executable).parent / "tpchgen-cli"
    return found or (str(beside) if beside.exists() else None)


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tool = _tpchgen()
    if tool is None:
        pytest.skip("tpchgen-cli is not installed (pip install 'icefloe[test]')")
    base = tmp_path_factory.mktemp("tpch")
    data = base / "data"
    subprocess.run([tool, "parquet", "-s", "0.01", "--output-dir", str(data)], check=True, capture_output=True)
    server = ServerProcess(base / "warehouse").start()
    try:
        with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA tpch")
            for table in TABLES:
                cur.adbc_ingest(table, pq.read_table(data / f"{table}.parquet"), mode="create", db_schema_name="tpch")
        yield server, data
    finally:
        server.stop()


def test_the_generated_strings_are_views(tpch: tuple[ServerProcess, Path]) -> None:
    # what made 13 of the 22 queries fail before (issue 45): keep the data that shows it
    assert "string_view" in str(pq.read_schema(tpch[1] / "nation.parquet").field("n_name").type)


@pytest.mark.parametrize("number", NUMBERS)
def test_tpch_answer_equals_duckdb(tpch: tuple[ServerProcess, Path], number: int) -> None:
    server, data = tpch
    local = duckdb.connect(":memory:")
    for table in TABLES:
        path = str(data / f"{table}.parquet").replace("'", "''")
        local.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{path}')")
    expected = rows_of(local.sql(query(number)).to_arrow_table())
    with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query(number, "tpch."))
        got = rows_of(cur.fetch_arrow_table())
    assert expected, "the query found no rows at this scale: it would prove nothing"
    assert same_answer(expected, got) is None, (number, same_answer(expected, got))
