"""The thin client: ``import icefloe; icefloe.connect(uri)`` loads only what a remote client uses
(pyarrow and the wire protocol), not the RocksDB catalog, pyiceberg, DuckDB or pandas; and what
it prints is readable (reprs of ``Lake`` and ``Table``, a remote schema without Flight SQL's
per-column metadata)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
from cli_runner import cli_env
from servers import ServerProcess

import icefloe

HEAVY = ("pyiceberg", "rocksdict", "pandas", "duckdb", "sqlglot", "pydantic")


def _fresh(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line (its last)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, env=cli_env())
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


def _loaded(prefix: str = "") -> str:
    return f"""
        import json, sys
        heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
        catalog = sorted(m for m in sys.modules if m == "catalog" or m.startswith("catalog.")
                         if m not in ("catalog", "catalog.key_rules"))
        print(json.dumps({{"heavy": heavy, "catalog": catalog{prefix}}}))
    """


def test_connect_imports_no_catalog_pyiceberg_duckdb_or_pandas(remote_server: ServerProcess) -> None:
    answer = _fresh(f"""
        import icefloe
        lake = icefloe.connect({remote_server.location!r})
        {_loaded()}
    """)
    assert answer == {"heavy": [], "catalog": []}, answer


def test_reading_and_appending_stay_thin(remote_server: ServerProcess) -> None:
    remote = icefloe.connect(remote_server.location)
    remote.create_namespace("thin")
    remote.create_table("thin.t", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    # The rows travel as Arrow IPC bytes: building them with pa.array / pa.table in the child
    # would import pandas by itself (pyarrow looks for pandas objects among Python values).
    sink = pa.BufferOutputStream()
    rows = pa.table({"id": [1, 2], "v": ["a", "b"]})
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    answer = _fresh(f"""
        import icefloe, pyarrow as pa
        lake = icefloe.connect({remote_server.location!r})
        t = lake.table("thin.t")
        data = pa.ipc.open_stream(pa.py_buffer(bytes.fromhex({sink.getvalue().to_pybytes().hex()!r}))).read_all()
        event = t.append(data, idempotency_key="k1")
        rows = t.scan(filter="id > 1").to_table().num_rows
        {_loaded(', "rows": rows, "appended": event.rows')}
    """)
    assert answer == {"heavy": [], "catalog": [], "rows": 1, "appended": 2}, answer
    remote.close()


def test_reprs_and_a_remote_schema_print_readably(remote_server: ServerProcess, tmp_path: Path) -> None:
    remote = icefloe.connect(remote_server.location)
    remote.create_namespace("shown")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("city", pa.string())])
    remote.create_table("shown.t", schema)
    table = remote.table("shown.t")
    assert repr(remote) == f"icefloe.Lake(remote {remote_server.location})"
    assert repr(table) == f"icefloe.Table('shown.t', columns: id int64 not null, city string; " \
                          f"remote {remote_server.location})"
    printed = str(table.schema)
    assert "ARROW:FLIGHT:SQL" not in printed and printed.splitlines()[:2] == ["id: int64 not null", "city: string"]
    assert "ARROW:FLIGHT:SQL" not in str(table.scan().schema) + str(table.scan().to_table().schema)
    remote.close()
    with icefloe.open(tmp_path / "warehouse") as local:
        local.create_namespace("shown")
        created = local.create_table("shown.t", schema)
        assert repr(local) == f"icefloe.Lake(in-process file://{tmp_path / 'warehouse'})"
        # in-process, strings are Iceberg's large_string
        assert repr(created) == ("icefloe.Table('shown.t', columns: id int64 not null, city large_string; "
                                 f"in-process file://{tmp_path / 'warehouse'})")
