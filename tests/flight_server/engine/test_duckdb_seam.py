"""DuckDB's private ``duckdb._seam`` as icefloe uses it: behind one module, on the pinned minor.

If a DuckDB upgrade changes the private API, these fail first, naming what changed, instead of
queries failing one at a time in a running server.
"""

from __future__ import annotations

import ast
import tomllib
import types
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from duckdb import _seam
from packaging.requirements import Requirement
from packaging.version import Version

from flight_server.engine import duckdb_seam

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def test_the_installed_duckdb_is_the_pinned_minor() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [Requirement(d) for d in deps if Requirement(d).name == "duckdb"]
    installed = Version(duckdb.__version__)
    assert pin.specifier.contains(installed), f"duckdb {installed} is installed; pyproject.toml pins {pin}"
    assert f"{installed.major}.{installed.minor}" == duckdb_seam.TESTED_MINOR, (
        f"duckdb_seam.TESTED_MINOR says {duckdb_seam.TESTED_MINOR}; installed duckdb is {installed}")
    # A pin wider than one minor release would let pip install a DuckDB nobody tested _seam on.
    assert not pin.specifier.contains(Version(f"{installed.major}.{installed.minor + 1}.0"))


def test_the_private_api_icefloe_needs_is_there() -> None:
    assert duckdb_seam.load_private_api() is _seam


def test_a_changed_private_api_stops_with_a_message_naming_what_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in for a future duckdb._seam: the real one without bind, and a Signature lacking writes.
    changed = types.SimpleNamespace(**{k: v for k, v in vars(_seam).items() if k != "bind"})
    changed.Signature = types.SimpleNamespace(_fields=("names", "types", "parameters"))
    monkeypatch.setattr(duckdb, "_seam", changed)
    with pytest.raises(duckdb_seam.DuckDBPrivateAPIChanged) as caught:
        duckdb_seam.load_private_api()
    message = str(caught.value)
    assert f"duckdb {duckdb.__version__} is installed" in message
    assert "_seam.bind" in message and "_seam.Signature.writes" in message
    assert "_seam.catalog_version" not in message
    assert "duckdb>=2.0,<2.1" in message


def test_bind_names_types_parameters_and_writes_without_running(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE t (a INTEGER, b VARCHAR)")
    sig = duckdb_seam.bind(con, "SELECT a, b || 'x' AS c FROM t WHERE a > ?")
    assert list(sig.names) == ["a", "c"]
    assert [str(t) for t in sig.types] == ["INTEGER", "VARCHAR"]
    assert [(str(n), str(t)) for n, t in sig.parameters] == [("1", "INTEGER")]
    assert sig.writes is False
    # With values, the statement's parameters take the values' types.
    assert [str(t) for t in duckdb_seam.bind(con, "SELECT ? AS p", values=[1.5]).types] == ["DOUBLE"]
    insert = duckdb_seam.bind(con, "INSERT INTO t VALUES (1, 'y')")
    assert insert.writes is True
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)  # bound, not run
    statement = con.extract_statements("SELECT b FROM t")[0]
    assert list(duckdb_seam.bind(con, statement).names) == ["b"]
    with pytest.raises(duckdb.Error):
        duckdb_seam.bind(con, "SELECT no_such_column FROM t")


def test_catalog_version_counts_statements_that_may_rename(con: duckdb.DuckDBPyConnection) -> None:
    before = duckdb_seam.catalog_version(con)
    assert isinstance(before, int)
    con.execute("SELECT 1").fetchall()
    assert duckdb_seam.catalog_version(con) == before
    con.execute("CREATE VIEW v AS SELECT 1 AS x")
    assert duckdb_seam.catalog_version(con) > before


def test_arrow_types_of_duckdb_types(con: duckdb.DuckDBPyConnection) -> None:
    types_ = [duckdb_seam.parse_type(con, name) for name in ("BIGINT", "VARCHAR", "DECIMAL(10,2)", "TIMESTAMP")]
    schema = duckdb_seam.arrow_schema(con, ["a", "b", "c", "d"], types_)
    assert schema.types[0] == pa.int64() and schema.types[2] == pa.decimal128(10, 2)
    assert pa.types.is_string(schema.types[1]) or pa.types.is_large_string(schema.types[1])
    assert pa.types.is_timestamp(schema.types[3])
    assert duckdb_seam.arrow_field(con, "n", types_[0]) == pa.field("n", pa.int64())


def test_nothing_else_imports_the_private_module() -> None:
    door = ROOT / "flight_server" / "engine" / "duckdb_seam.py"
    found = []
    for package in ("catalog", "flight_server", "icefloe", "pyspark_icefloe"):
        for path in (ROOT / package).rglob("*.py"):
            if path == door:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("duckdb._seam")]
    assert not found, f"import duckdb._seam only through flight_server/engine/duckdb_seam.py: {found}"


def test_stream_runs_one_statement_into_arrow(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE t AS SELECT range AS a FROM range(5)")
    reader = duckdb_seam.stream(con, "SELECT a * 2 AS b FROM t ORDER BY a", 2)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.read_all().column("b").to_pylist() == [0, 2, 4, 6, 8]
    explained = duckdb_seam.stream(con, "EXPLAIN SELECT a FROM t", 2).read_all()
    assert explained.num_rows >= 1
    with pytest.raises(duckdb.Error):
        duckdb_seam.stream(con, "SELECT no_such_column FROM t", 2)
