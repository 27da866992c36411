"""The one door to DuckDB's private ``duckdb._seam`` module (binder access).

The engine and the SQL writes need what DuckDB's public API does not give: the output names and
types of a statement (and of its parameters) without running it, a count of the statements that
may have changed what a name binds to on a connection, a type name parsed on a connection, and
the Arrow types of DuckDB types. ``_seam`` has
them, but it is private: it may change in any release, so ``pyproject.toml`` pins duckdb to the
minor release this was tested with, nothing else imports ``_seam``, and this module checks at
import what it relies on, so that a changed DuckDB stops the server at start with a message
that says so rather than failing one query at a time (``tests/flight_server/engine/
test_duckdb_seam.py`` exercises the same calls against a real connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import duckdb
import pyarrow as pa

# What the wrappers below call, and the fields of the Signature ``bind`` returns that they read.
NEEDED_FUNCTIONS = ("bind", "catalog_version", "arrow_schema", "parse_type", "submit")
NEEDED_SIGNATURE_FIELDS = ("names", "types", "parameters", "writes")
TESTED_MINOR = "2.0"


class DuckDBPrivateAPIChanged(ImportError):
    """The installed DuckDB lacks the part of ``duckdb._seam`` icefloe was built against."""


def _missing(module: Any) -> list[str]:
    missing = [f"_seam.{name}" for name in NEEDED_FUNCTIONS if not callable(getattr(module, name, None))]
    fields = getattr(getattr(module, "Signature", None), "_fields", ())
    missing += [f"_seam.Signature.{name}" for name in NEEDED_SIGNATURE_FIELDS if name not in fields]
    return missing


def _changed(what: str) -> DuckDBPrivateAPIChanged:
    return DuckDBPrivateAPIChanged(
        f"duckdb {duckdb.__version__} is installed, but icefloe uses DuckDB's private module duckdb._seam "
        f"as of duckdb {TESTED_MINOR}.x and {what}; install the duckdb version pyproject.toml pins "
        f"(pip install 'duckdb>={TESTED_MINOR},<2.1') or port flight_server/engine/duckdb_seam.py")


def load_private_api() -> Any:
    """``duckdb._seam``, checked: raises ``DuckDBPrivateAPIChanged`` naming what is gone."""
    try:
        from duckdb import _seam
    except ImportError:
        raise _changed("this DuckDB has no duckdb._seam") from None
    missing = _missing(_seam)
    if missing:
        raise _changed(f"this DuckDB lacks {', '.join(missing)}")
    return _seam


_seam = load_private_api()


class BoundStatement(Protocol):
    """What binding a statement tells (the fields of ``_seam.Signature`` the engine reads)."""

    names: list[str]
    types: list[Any]  # DuckDBPyType
    parameters: list[tuple[str, Any]]  # (name, DuckDBPyType) of each parameter
    writes: bool


def bind(cursor: duckdb.DuckDBPyConnection, sql: str | duckdb.Statement,
         values: Sequence[Any] | None = None) -> BoundStatement:
    """Names and types of ``sql``'s output and parameters, and whether it writes, without running it.
    With ``values`` the parameters are typed from them. Raises ``duckdb.Error`` for bad SQL."""
    signature: BoundStatement = _seam.bind(cursor, sql, values=values)
    return signature


def stream(cursor: duckdb.DuckDBPyConnection, sql: str, batch_rows: int) -> pa.RecordBatchReader:
    """Run one statement (no parameter values) and stream its result as Arrow.

    ``cursor.sql(sql).to_arrow_reader()`` binds the statement to make a relation, then runs it,
    which binds it again: on a query over several ``read_parquet`` views the first bind was
    about a fifth of the server's time for a small TPC-H query. This runs it once."""
    reader: pa.RecordBatchReader = _seam.submit(cursor, sql, None, "stream", batch_rows).arrow_reader()
    return reader


def catalog_version(cursor: duckdb.DuckDBPyConnection) -> int:
    """How many statements that may change what a name binds to have run on this connection."""
    return int(_seam.catalog_version(cursor))


def arrow_field(cursor: duckdb.DuckDBPyConnection, name: str, duckdb_type: Any) -> pa.Field:
    """The Arrow field DuckDB produces for a column ``name`` of ``duckdb_type``."""
    return arrow_schema(cursor, [name], [duckdb_type]).field(0)


def arrow_schema(cursor: duckdb.DuckDBPyConnection, names: list[str], duckdb_types: Sequence[Any]) -> pa.Schema:
    """The Arrow schema DuckDB produces for columns of these names and types."""
    schema: pa.Schema = _seam.arrow_schema(cursor, names, list(duckdb_types))
    return schema


def parse_type(cursor: duckdb.DuckDBPyConnection, type_name: str) -> Any:
    """A DuckDB type (``DuckDBPyType``) from its name, resolved on this connection (its own types too)."""
    return _seam.parse_type(cursor, type_name)
