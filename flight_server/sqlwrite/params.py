"""Parameter types of a prepared write (INSERT / UPDATE / DELETE / MERGE / CREATE TABLE AS).

Clients bind what the parameter schema says: the stock JDBC driver refuses ``setInt`` on a
``Utf8`` parameter, so each ``?`` must carry the type of what it fills. DuckDB decides, as it
would for its own tables: the statement is bound (never run) in a scratch, sandboxed in-memory
database holding an *empty* table for every catalog table the statement names, with the
DuckDB types the engine's views expose (``types.duckdb_type``), under the same names
(catalog ``icefloe``, the session schema on the search path). A parameter that fills a column
(``VALUES (?)``, ``SET c = ?``, ``WHERE c = ?``, ``MERGE ... INSERT VALUES (?)``) thus gets the
column's type, ``LIMIT ?`` a BIGINT, ``WHERE ?`` a BOOLEAN.

Where DuckDB's binder leaves a parameter UNKNOWN (an overloaded operator: ``id + ? > 3``;
a bare select item of ``INSERT ... SELECT ?``), the statement's structure decides
(``_from_context``): the target column an INSERT select item or VALUES expression fills,
the other operand of an arithmetic or comparison operator when that is a column or literal,
VARCHAR for ``LIKE`` / ``||``. What is still unknown (``SELECT ? ...`` with no target, or a
statement that does not bind, e.g. a missing table: the error comes when it runs) is declared
``utf8``: every client can send text, and the write casts it to the column type by DuckDB's
rules when it runs.

Values a client binds are converted to the column types when the write runs (the INSERT /
UPDATE casts in ``dml``), whatever Arrow types they arrive as.
"""

from __future__ import annotations

import logging
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from sqlglot import exp

from flight_server import errors
from flight_server.engine import CATALOG_NAME, duckdb_seam
from flight_server.engine.duckdb_types import duckdb_type
from flight_server.engine.iceberg_source import quote
from flight_server.engine.slots import SANDBOX_SETTINGS
from flight_server.engine.sql_text import parameter_markers
from flight_server.engine.tables import name_candidates
from flight_server.sqlwrite.parse import parse

logger = logging.getLogger("icefloe.sqlwrite.params")

_TYPED_STATEMENTS = {"INSERT", "UPDATE", "DELETE", "MERGE_INTO", "CREATE"}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_TEXT = (exp.Like, exp.ILike, exp.DPipe, exp.RegexpLike, exp.SimilarTo)
FALLBACK = "VARCHAR"


def write_parameter_schema(sql: str, default_schema: tuple[str, ...] | None, catalog: Any) -> pa.Schema:
    """One field ``$n`` per parameter marker of the write ``sql``, typed as the module docstring says."""
    count = parameter_markers(sql)
    if count == 0:
        return pa.schema([])
    found: dict[int, str] = {}
    con = _scratch()
    try:
        try:
            tree = parse(sql)
            tables = _create_tables(con, tree, default_schema, catalog)
            found = _bound_types(con, sql)
            for position in range(1, count + 1):
                if found.get(position, "UNKNOWN") == "UNKNOWN":
                    typed = _from_context(tree, position, tables)
                    if typed is not None:
                        found[position] = typed
        except (errors.IcefloeError, duckdb.Error, ValueError) as exc:
            # Not bindable here (a missing table, a metadata table, unusual syntax): the write
            # reports its own error when it runs; the parameters fall back to text.
            logger.debug("write parameters not typed: %s", errors.first_line(exc))
        names = [f"${i}" for i in range(1, count + 1)]
        types = [duckdb_seam.parse_type(con, _known(found.get(i))) for i in range(1, count + 1)]
        return client_parameter_schema(duckdb_seam.arrow_schema(con, names, types))
    finally:
        con.close()


def client_parameter_schema(schema: pa.Schema) -> pa.Schema:
    """A parameter schema as clients can fill it correctly (queries' and writes').

    The stock Flight SQL JDBC driver (18.x) writes the epoch *milliseconds* of a
    ``setTimestamp`` / ``setTime`` value into whatever timestamp / time vector the schema names,
    without converting the unit: a microsecond parameter would arrive 1000 times too small.
    So timestamps and times are declared in milliseconds, the unit every client fills right;
    clients that bind Arrow batches of their own (ADBC) may still send any unit, and the value
    is cast to the column's microseconds when the statement runs.
    """
    fields = []
    for f in schema:
        typ = f.type
        if pa.types.is_timestamp(typ) and typ.unit in ("us", "ns"):
            typ = pa.timestamp("ms", typ.tz)
        elif pa.types.is_time(typ) and typ.unit in ("us", "ns"):
            typ = pa.time32("ms")
        fields.append(f.with_type(typ))
    return pa.schema(fields, metadata=schema.metadata)


def _known(name: str | None) -> str:
    return FALLBACK if name is None or name == "UNKNOWN" else name


def _scratch() -> duckdb.DuckDBPyConnection:
    """A sandboxed in-memory database laid out like an engine slot (catalog ``icefloe``)."""
    con = duckdb.connect(":memory:", config={**SANDBOX_SETTINGS, "temp_directory": ""})
    con.execute(f"ATTACH ':memory:' AS {CATALOG_NAME}")
    con.execute(f"USE {CATALOG_NAME}")
    con.execute("SET python_enable_replacements = false")
    con.execute("SET lock_configuration = true")
    return con


class _Tables:
    """The catalog tables a statement names, as created in the scratch database."""

    def __init__(self) -> None:
        self.columns: dict[tuple[tuple[str, ...], str], list[tuple[str, str]]] = {}
        self.by_node: dict[int, list[tuple[str, str]]] = {}

    def column_type(self, column: exp.Column) -> str | None:
        """The type of a column reference, when the tables named agree on one."""
        found = {t for cols in self.columns.values() for n, t in cols if n.lower() == column.name.lower()}
        return found.pop() if len(found) == 1 else None


def _create_tables(
    con: duckdb.DuckDBPyConnection, tree: exp.Expression, default_schema: tuple[str, ...] | None, catalog: Any
) -> _Tables:
    tables = _Tables()
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    schemas: set[tuple[str, ...]] = set()
    for node in tree.find_all(exp.Table):
        parts = tuple(p for p in (node.catalog, node.db, node.name) if p)
        if not parts or (len(parts) == 1 and parts[0].lower() in ctes):
            continue
        if parts[0] == CATALOG_NAME and len(parts) > 1:
            parts = parts[1:]
        for ns, name in name_candidates(parts, default_schema):
            try:
                table = catalog.load_table((*ns, name))
            except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                continue
            columns = [(f.name, duckdb_type(f.field_type)) for f in table.schema().fields]
            tables.by_node[id(node)] = columns
            if (ns, name) not in tables.columns:
                tables.columns[(ns, name)] = columns
                schema = quote(".".join(ns))
                if ns not in schemas:
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{schema}")
                    schemas.add(ns)
                defs = ", ".join(f"{quote(n)} {t}" for n, t in columns)
                con.execute(f"CREATE TABLE {CATALOG_NAME}.{schema}.{quote(name)} ({defs})")
            break
    if default_schema:
        path = f"{CATALOG_NAME}.{quote('.'.join(default_schema))},{CATALOG_NAME}.main"
        if default_schema not in schemas:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_NAME}.{quote('.'.join(default_schema))}")
        con.execute("SET search_path = '" + path.replace("'", "''") + "'")
    return tables


def _bound_types(con: duckdb.DuckDBPyConnection, sql: str) -> dict[int, str]:
    statements = con.extract_statements(sql)
    if len(statements) != 1 or statements[0].type.name not in _TYPED_STATEMENTS:
        return {}
    sig = duckdb_seam.bind(con, statements[0])
    found: dict[int, str] = {}
    for name, typ in sig.parameters:
        if str(name).isdigit():
            found[int(name)] = str(typ)
    return found


# -- what the statement's structure says about a parameter DuckDB left untyped -------------------


def _from_context(tree: exp.Expression, position: int, tables: _Tables) -> str | None:
    for node in tree.find_all(exp.Placeholder):
        if node.this == str(position):
            typed = _typed(node, tree, tables)
            if typed is not None:
                return typed
    return None


def _typed(node: exp.Expression, tree: exp.Expression, tables: _Tables) -> str | None:
    """The type the place of ``node`` (a parameter, or an expression holding one) asks for."""
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    parent = node.parent
    if parent is None:
        return None
    if isinstance(parent, _TEXT):
        return "VARCHAR"
    if isinstance(parent, (exp.Limit, exp.Offset, exp.Fetch)):
        return "BIGINT"
    if isinstance(parent, _ARITHMETIC + _COMPARISON):
        other = parent.expression if node is parent.this else parent.this
        operand = _operand_type(other, tables)
        if isinstance(parent, _ARITHMETIC) and not (operand and isinstance(other.unnest(), exp.Column)):
            # ``? + 1`` filling a column: the column's type; else the other operand's. A column
            # operand wins (``id + ? > 3``: id's type, not the literal's).
            return _typed(parent, tree, tables) or operand
        return operand
    return _target_type(node, tree, tables)


def _operand_type(node: exp.Expression, tables: _Tables) -> str | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return tables.column_type(node)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "VARCHAR"
        return "BIGINT" if node.is_int else "DOUBLE"
    if isinstance(node, exp.Cast):
        return node.to.sql(dialect="duckdb")
    return None


def _target_type(node: exp.Expression, tree: exp.Expression, tables: _Tables) -> str | None:
    """The target column an INSERT's VALUES item or top-level select item fills."""
    insert = tree if isinstance(tree, exp.Insert) else None
    if insert is None:
        return None
    target = insert.this.this if isinstance(insert.this, exp.Schema) else insert.this
    columns = tables.by_node.get(id(target))
    if columns is None:
        return None
    listed = [i.name for i in insert.this.expressions] if isinstance(insert.this, exp.Schema) else None
    by_lower = {n.lower(): t for n, t in columns}
    order = [by_lower.get(n.lower()) for n in listed] if listed is not None else [t for _, t in columns]
    item = node.parent if isinstance(node.parent, exp.Alias) else None
    holder = (item or node).parent
    index = None
    if isinstance(holder, exp.Tuple) and isinstance(holder.parent, exp.Values):
        index = _index(holder.expressions, node)
    elif isinstance(holder, exp.Select) and holder is insert.expression:
        if insert.args.get("by_name") and item is not None:
            return by_lower.get(item.alias.lower())
        index = _index(holder.expressions, item or node)
    if index is None or index >= len(order):
        return None
    return order[index]


def _index(items: list[exp.Expression], node: exp.Expression) -> int | None:
    return next((i for i, e in enumerate(items) if e is node), None)
