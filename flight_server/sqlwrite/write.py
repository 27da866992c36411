"""``Write``: one SQL write statement being executed, what every statement handler (``ddl``,
``dml``, ``mor``, ``views``) receives from ``SqlWriter.run``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from catalog import commit_context
from catalog.quarantine import check_table

if TYPE_CHECKING:
    from flight_server.engine import Engine


@dataclass
class Write:
    """One SQL write being executed: what every handler needs."""

    sql: str
    tree: exp.Expression
    engine: Engine
    catalog: Any
    principal: str | None
    default_schema: tuple[str, ...] | None
    params: list[Any] | None
    context: Any
    authorize: Any  # (role) -> principal
    # The server's group-commit Appender (catalog.append), shared with DoPut; None without one.
    appender: Any = None
    # Set on the last attempt: hold the target table's commit slot for the whole statement.
    exclusive: bool = False
    # Several bound parameter rows (INSERT only: one commit for all of them).
    param_rows: list[list[Any]] | None = None
    # The server's quality gate (catalog.expectations), also inside a transaction.
    quality_gate: Any = None

    def check_quality(self, table: Any, rows: pa.Table, write_kind: str) -> None:
        """Refuse ``rows`` (new rows of an UPDATE / MERGE, or of a write in a transaction)
        unless they pass the table's expectations; quarantine acts as block here."""
        check_table(self.quality_gate, self.catalog, tuple(table.name()), table.properties, rows, write_kind)

    @contextlib.contextmanager
    def table_slot(self, identifier: tuple[str, ...]) -> Iterator[None]:
        """On the last attempt, keep appends (DoPut, ingest, INSERT) off the table until the
        statement has committed, so a busy table cannot starve a DELETE / UPDATE."""
        if not self.exclusive or self.appender is None or not identifier:
            yield
            return
        with self.appender.committer(tuple(identifier[:-1]), identifier[-1]).exclusive():
            yield

    @contextlib.contextmanager
    def committing(self, operation: str, inputs: list[str]) -> Iterator[None]:
        with commit_context(principal=self.principal, operation=operation,
                            extra={"sql": self.sql, "inputs": sorted(set(inputs))}):
            yield
