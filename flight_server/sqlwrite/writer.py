"""SQL writes: one statement -> at most one Iceberg commit through the catalog.

The Flight SQL layer hands every statement DuckDB classifies as a write (and TRUNCATE) to
``SqlWriter.run``. Each statement kind has one handler (``ddl``, ``dml``); a handler reads
what it needs at one pinned snapshot and commits once, inside ``commit_context`` so the
commit-log record carries the principal, the operation, the SQL text and the input tables
(lineage reads ``extra["sql"]`` and ``extra["inputs"]``).

Conflicts: a DML commit is based on the snapshot it read; if another commit landed first,
pyiceberg's requirement check raises ``CommitFailedException`` and the whole statement runs
again on the new snapshot (a few times), then gives up with ABORTED. Nothing is ever merged
blindly. On any failure nothing is committed (data files already written are left for
orphan removal).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, ValidationException
from sqlglot import exp

from flight_server import errors
from flight_server.sqlwrite import ddl, dml, merge
from flight_server.sqlwrite import views as sql_views
from flight_server.sqlwrite.parse import parse, table_name
from flight_server.sqlwrite.write import Write

if TYPE_CHECKING:
    from flight_server.engine import Engine

logger = logging.getLogger("icefloe.sqlwrite")

COMMIT_ATTEMPTS = 6


class SqlWriter:
    def __init__(self, engine: Engine, catalog: Any, appender: Any = None, lineage: Any = None) -> None:
        self.engine = engine
        self.catalog = catalog
        # Callables returning the Appender and the lineage exporter (both are created after
        # this writer, by the server).
        self._appender = appender
        self._lineage = lineage

    def run(
        self, sql: str, default_schema: tuple[str, ...] | None, params: list[Any] | None,
        principal: str | None, authorize: Any, context: Any = None, param_rows: list[list[Any]] | None = None,
        catalog: Any = None,
    ) -> int:
        """Execute one write statement; returns the number of rows it affected (0 for DDL).

        ``param_rows``: several parameter rows (a JDBC batch). An INSERT appends the rows of
        all of them in one commit; any other statement runs once per row, a commit each.
        ``catalog``: a transaction's catalog (``flight_server.transactions``): the commit is
        staged there, so the group-commit appender (which lands at once) is not used.
        """
        tree = parse(sql)
        if param_rows is not None and len(param_rows) > 1 and not isinstance(tree, exp.Insert):
            return sum(self.run(sql, default_schema, row, principal, authorize, context, catalog=catalog)
                       for row in param_rows)
        appender = self._appender() if self._appender is not None and catalog is None else None
        target_catalog = catalog if catalog is not None else self.catalog
        write = Write(sql, tree, self.engine, target_catalog, principal, default_schema, params, context, authorize,
                      appender, param_rows=param_rows if param_rows is not None and len(param_rows) > 1 else None)
        server_appender = self._appender() if self._appender is not None else None
        write.quality_gate = getattr(server_appender, "quality_gate", None)
        handler = _handler(tree)
        with self._tracked(tree, sql, default_schema, principal):
            return self._attempts(write, handler, tree, default_schema)

    @contextlib.contextmanager
    def _tracked(
        self, tree: exp.Expression, sql: str, default_schema: tuple[str, ...] | None, principal: str | None
    ) -> Iterator[None]:
        """A statement that fails after it began is reported to lineage as a FAIL run."""
        lineage = self._lineage() if self._lineage is not None else None
        target = _lineage_target(tree, default_schema)
        if lineage is None or target is None:
            yield
            return
        operation = _statement_kind(tree).lower()
        with lineage.track_write(target[:-1], target[-1], operation, principal=principal, extra={"sql": sql}):
            yield

    def _attempts(
        self, write: Write, handler: Any, tree: exp.Expression, default_schema: tuple[str, ...] | None
    ) -> int:
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            write.exclusive = attempt == COMMIT_ATTEMPTS
            try:
                with write.table_slot(_rewritten_table(tree, default_schema)):
                    count = int(handler(write))
                logger.info("SQL write done (%s, %d rows)", type(tree).__name__.lower(), count)
                return count
            except (CommitFailedException, ValidationException):
                logger.info("SQL write lost a commit race (attempt %d of %d)", attempt, COMMIT_ATTEMPTS)
                time.sleep(random.uniform(0.005, 0.02) * attempt)  # spread out contending writers
            except errors.IcefloeError as exc:
                raise _named(exc, tree, default_schema) from None
        raise errors.Aborted(
            f"{_statement_kind(tree)}: the table kept changing under concurrent commits; nothing was committed, retry"
        )


def _named(exc: errors.IcefloeError, tree: exp.Expression, default_schema: tuple[str, ...] | None) -> Exception:
    """``exc`` with a message that names the statement and its table, without DuckDB's excerpt
    of the internal query a DELETE / UPDATE / INSERT runs (``LINE 1: SELECT __icefloe_file ...``)."""
    message = str(exc).split("\n\nLINE ")[0].split("\nLINE ")[0].strip()
    kind = _statement_kind(tree)
    if kind == "TRUNCATETABLE":
        kind = "TRUNCATE"
    if message.upper().startswith(kind):
        return exc if message == str(exc) else type(exc)(message)
    try:
        target = _target_name(tree, default_schema)
    except errors.IcefloeError:
        target = ""
    verb = {"INSERT": "INSERT INTO", "DELETE": "DELETE FROM", "MERGE": "MERGE INTO"}.get(kind, kind)
    return type(exc)(f"{verb} {target}: {message}" if target else f"{verb}: {message}")


def _target_name(tree: exp.Expression, default_schema: tuple[str, ...] | None) -> str:
    node = tree.this if isinstance(tree, (exp.Insert, exp.Delete, exp.Update, exp.Merge)) else None
    if isinstance(tree, exp.TruncateTable) and tree.expressions:
        node = tree.expressions[0]
    if isinstance(tree, (exp.Alter, exp.Create)) and isinstance(tree.this, (exp.Table, exp.Schema)):
        node = tree.this
    return table_name(node, default_schema).qualified if node is not None else ""


def _rewritten_table(tree: exp.Expression, default_schema: tuple[str, ...] | None) -> tuple[str, ...]:
    """The table a DELETE / UPDATE / MERGE / TRUNCATE rewrites (empty for other statements)."""
    node = None
    if isinstance(tree, (exp.Delete, exp.Update, exp.Merge)):
        node = tree.this
    elif isinstance(tree, exp.TruncateTable) and len(tree.expressions) == 1:
        node = tree.expressions[0]
    if node is None:
        return ()
    return table_name(node, default_schema).identifier


def _lineage_target(tree: exp.Expression, default_schema: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The table a write changes, for lineage (None when it names no single table)."""
    node: Any = None
    if isinstance(tree, (exp.Insert, exp.Delete, exp.Update, exp.Merge)):
        node = tree.this
    elif isinstance(tree, exp.TruncateTable) and len(tree.expressions) == 1:
        node = tree.expressions[0]
    elif isinstance(tree, (exp.Create, exp.Alter, exp.Drop)) and str(tree.args.get("kind", "")).upper() == "TABLE":
        node = tree.this
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table):
        return None
    try:
        identifier = tuple(table_name(node, default_schema).identifier)
    except errors.IcefloeError:
        return None
    return identifier if len(identifier) >= 2 else None


def _statement_kind(tree: exp.Expression) -> str:
    return str(tree.key).upper()


def _handler(tree: exp.Expression) -> Any:
    if isinstance(tree, exp.Insert):
        return dml.insert
    if isinstance(tree, exp.Delete):
        return dml.delete
    if isinstance(tree, exp.Update):
        return dml.update
    if isinstance(tree, exp.TruncateTable):
        return dml.truncate
    if isinstance(tree, exp.Merge):
        return merge.merge
    if isinstance(tree, exp.Create):
        kind = str(tree.args.get("kind") or "").upper()
        if kind == "SCHEMA":
            return ddl.create_schema
        if kind == "TABLE":
            return ddl.create_table
        if kind == "VIEW":
            return sql_views.create_view
        raise errors.Unimplemented(f"CREATE {kind} is not supported (tables, views and schemas only)")
    if isinstance(tree, exp.Drop):
        kind = str(tree.args.get("kind") or "").upper()
        if kind == "SCHEMA":
            return ddl.drop_schema
        if kind == "TABLE":
            return ddl.drop_table
        if kind == "VIEW":
            return sql_views.drop_view
        raise errors.Unimplemented(f"DROP {kind} is not supported (tables, views and schemas only)")
    if isinstance(tree, exp.Alter):
        return ddl.alter_table
    raise errors.Unimplemented(f"{_statement_kind(tree)} statements are not supported")
