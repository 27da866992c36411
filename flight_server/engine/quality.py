"""The quality gate: a table's expectations, evaluated in DuckDB over each batch of an append.

Every expectation runs as ONE set-based query over the whole batch (registered as the view
``__icefloe_rows`` with a row number), never row by row. Each expectation's SQL goes through
the engine's sandbox policy (``policy.check_query``) inside a query whose shape we check on the
parse tree (one projection, one FROM naming only the batch, nothing else), in a sandboxed
DuckDB database of its own: an expectation cannot read a file, name another table, or change
a setting, whoever set the property. Anything that keeps an expectation from being evaluated
(bad SQL, a missing column, a non-boolean result, a refused function) is
``ExpectationUnusable``: the append is refused, never waved through.

A row passes an expectation when the expression is TRUE; NULL fails (write
``x IS NULL OR x > 0`` to let NULLs through). ``unique(a, b)`` fails every row whose key
repeats within the batch or repeats a key of an earlier batch of the same append.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.expectations import (
    BLOCK,
    QUARANTINE,
    QUARANTINE_SCHEMA,
    SAMPLE_ROWS,
    AssertionResult,
    BatchVerdict,
    Expectation,
    ExpectationUnusable,
    GateSession,
    QualityBlocked,
)
from flight_server import errors
from flight_server.engine import policy
from flight_server.engine.slots import SANDBOX_SETTINGS

logger = logging.getLogger("icefloe.engine.quality")

ROWS_VIEW = "__icefloe_rows"
ROW_NUMBER = "__icefloe_row"
_SEEN = "__icefloe_seen_"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class DuckDBQualityGate:
    """Hands out one ``DuckDBGateSession`` per append (``catalog.expectations.QualityGate``).

    All sessions share one sandboxed in-memory DuckDB database (opening one costs ~100 ms, more
    than a small append), each on a connection of its own: the batch view and the ``unique``
    key tables are temporary objects, which DuckDB keeps per connection.
    """

    def __init__(self) -> None:
        self._db: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._db is None:
                config = dict(SANDBOX_SETTINGS, threads=1, temp_directory="")
                db = duckdb.connect(":memory:", config=config)
                db.execute("SET python_enable_replacements = false")
                db.execute("SET lock_configuration = true")
                self._db = db
            return self._db.cursor()

    def session(self, table: str, expectations: list[Expectation], source_position: str | None,
                append_id: str) -> GateSession:
        return DuckDBGateSession(table, expectations, source_position, append_id, self._connection)

    def validate(self, table: str, expectations: list[Expectation], schema: pa.Schema) -> None:
        """Evaluate every expectation over no rows of ``schema``: what cannot be bound (bad SQL,
        a missing column, not a boolean, a refused function) raises ExpectationUnusable now,
        when it is declared, rather than at the first write."""
        session = DuckDBGateSession(table, expectations, None, "validate", self._connection)
        try:
            session.check(pa.RecordBatch.from_pylist([], schema=schema), force=True)
        finally:
            session.close()


class DuckDBGateSession:
    def __init__(self, table: str, expectations: list[Expectation], source_position: str | None,
                 append_id: str, connect: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        self.table = table
        self.expectations = expectations
        self.source_position = source_position
        self.append_id = append_id
        self._results = [AssertionResult(e.name, e.sql, e.action, e.kind) for e in expectations]
        for expectation in expectations:
            if expectation.problem:
                raise ExpectationUnusable(self._unusable(expectation, expectation.problem))
        self._db = connect()
        self._batches = 0
        self._combined_checked = False

    def _unusable(self, expectation: Expectation, why: str) -> str:
        return f"expectation {expectation.name!r} of {self.table} cannot be evaluated: {why}"

    def results(self) -> list[AssertionResult]:
        return self._results

    def close(self) -> None:
        try:
            self._db.close()
        except duckdb.Error:
            pass

    # -- one batch ------------------------------------------------------------------------

    def check(self, batch: pa.RecordBatch, force: bool = False) -> BatchVerdict:
        if (batch.num_rows == 0 and not force) or not self.expectations:
            return BatchVerdict(batch)
        numbered = pa.Table.from_batches([batch]).append_column(
            ROW_NUMBER, pa.array(np.arange(batch.num_rows, dtype=np.int64)))
        # This session's own connection: its temporary key tables (unique) live across batches.
        cur = self._db
        try:
            cur.register(ROWS_VIEW, numbered)
            failing = self._all_failing(cur)
        finally:
            cur.unregister(ROWS_VIEW)
        self._batches += 1
        blocked: list[str] = []
        # Only failing rows are ever touched one by one (sparse), never every row of the batch.
        reasons: dict[int, list[Expectation]] = {}
        for expectation, result, rows in zip(self.expectations, self._results, failing, strict=True):
            result.checked_rows += batch.num_rows
            result.failed_rows += len(rows)
            if not len(rows):
                continue
            if len(result.sample) < SAMPLE_ROWS:
                result.sample.extend(_sample(batch, rows[: SAMPLE_ROWS - len(result.sample)].tolist()))
            if expectation.action == BLOCK:
                blocked.append(f"{expectation.name!r} ({expectation.sql}) failed on {len(rows)} of "
                               f"{batch.num_rows} rows, e.g. {json.dumps(result.sample, default=str)}")
            elif expectation.action == QUARANTINE:
                for row in rows.tolist():
                    reasons.setdefault(row, []).append(expectation)
            else:
                logger.warning("expectation %r of %s failed on %d rows (warn)", expectation.name, self.table, len(rows))
        if blocked:
            raise QualityBlocked(f"append to {self.table} refused by its quality gate: expectation "
                                 + "; ".join(blocked) + "; nothing was committed", self._results)
        if not reasons:
            return BatchVerdict(batch)
        bad_rows = sorted(reasons)
        mask = np.ones(batch.num_rows, dtype=bool)
        mask[bad_rows] = False
        return BatchVerdict(batch.filter(pa.array(mask)), self._quarantine_rows(batch, bad_rows, reasons))

    def _all_failing(self, cur: duckdb.DuckDBPyConnection) -> list[np.ndarray]:
        """Per expectation, the failing row numbers. Every row expectation is checked on its
        own once (policy, shape, type: ``_failing``, which also names what went wrong); from
        the second batch on they run as ONE query, one scan of the batch for all of them."""
        row_checks = [(i, e) for i, e in enumerate(self.expectations) if e.unique is None]
        found: dict[int, np.ndarray] = {}
        if self._batches and row_checks:
            columns = ", ".join(f"({e.sql}) AS __icefloe_ok_{i}" for i, e in row_checks)
            combined = f"SELECT {ROW_NUMBER}, {columns} FROM {ROWS_VIEW}"
            try:
                if not self._combined_checked:  # the whole text passes the policy too, once
                    self._check_shape(cur, combined, 1 + len(row_checks))
                    self._combined_checked = True
                result = cur.sql(combined).to_arrow_table()
            except (errors.IcefloeError, duckdb.Error):
                result = None  # checked one by one below, which says which one and why
            if result is not None and all(pa.types.is_boolean(result.column(k + 1).type)
                                          for k in range(len(row_checks))):
                for k, (i, _) in enumerate(row_checks):
                    failed = pc.invert(pc.fill_null(result.column(k + 1), False))
                    found[i] = np.sort(result.column(0).filter(failed).to_numpy())
        return [found[i] if i in found else self._failing(cur, e, i) for i, e in enumerate(self.expectations)]

    def _failing(self, cur: duckdb.DuckDBPyConnection, expectation: Expectation, index: int) -> np.ndarray:
        """Row numbers (in the batch) that fail ``expectation``, from one query over the batch."""
        try:
            if expectation.unique is not None:
                return self._failing_unique(cur, expectation, index)
            sql = f"SELECT {ROW_NUMBER}, ({expectation.sql}) AS __icefloe_ok FROM {ROWS_VIEW}"
            self._check_shape(cur, sql, 2)
            result = cur.sql(sql).to_arrow_table()
        except (errors.IcefloeError, duckdb.Error) as exc:
            raise ExpectationUnusable(self._unusable(expectation, errors.first_line(exc))) from None
        verdict = result.column(1)
        if not pa.types.is_boolean(verdict.type):
            raise ExpectationUnusable(self._unusable(expectation, f"it gives {verdict.type}, not a boolean"))
        failed = pc.invert(pc.fill_null(verdict, False))
        return np.sort(result.column(0).filter(failed).to_numpy())

    def _failing_unique(self, cur: duckdb.DuckDBPyConnection, expectation: Expectation, index: int) -> np.ndarray:
        assert expectation.unique is not None
        cols = ", ".join(_quote(c) for c in expectation.unique)
        seen = f"{_SEEN}{index}"
        if self._batches == 0:
            cur.execute(f"CREATE TEMP TABLE {seen} AS SELECT {cols} FROM {ROWS_VIEW} LIMIT 0")
        # A hash join against the keys of earlier batches (a correlated EXISTS ran as a nested
        # loop: 10x the cost of the append itself), and a window count within this batch.
        keys = " AND ".join(f"s.{_quote(c)} IS NOT DISTINCT FROM r.{_quote(c)}" for c in expectation.unique)
        result = cur.sql(
            f"SELECT r.{ROW_NUMBER} FROM (SELECT *, count(*) OVER (PARTITION BY {cols}) AS __icefloe_n "
            f"FROM {ROWS_VIEW}) r LEFT JOIN (SELECT *, true AS __icefloe_seen FROM {seen}) s ON {keys} "
            "WHERE r.__icefloe_n > 1 OR s.__icefloe_seen"
        ).to_arrow_table()
        cur.execute(f"INSERT INTO {seen} SELECT DISTINCT {cols} FROM {ROWS_VIEW}")
        return np.sort(result.column(0).to_numpy())

    def _check_shape(self, cur: duckdb.DuckDBPyConnection, sql: str, columns: int) -> None:
        """The expectation must stay an expression: the query built around it has to come out
        as exactly our projection over the batch, under the engine's sandbox policy."""
        tree = policy.check_query(cur, sql, explain=False)
        node = (tree.statement or {}).get("node") or {}
        refs = {".".join(t.parts).lower() for t in tree.tables}
        if (node.get("type") != "SELECT_NODE" or len(node.get("select_list") or []) != columns
                or (node.get("from_table") or {}).get("table_name") != ROWS_VIEW
                or node.get("where_clause") or node.get("group_expressions") or node.get("having")
                or node.get("modifiers") or refs - {ROWS_VIEW}):
            raise errors.InvalidArgument("it must be one boolean expression over the row's columns "
                                         "(no other table, clause or statement)")

    def _quarantine_rows(self, batch: pa.RecordBatch, rows: list[int],
                         reasons: dict[int, list[Expectation]]) -> pa.Table:
        now = datetime.datetime.now(datetime.UTC)
        records = batch.take(pa.array(rows)).to_pylist()
        return pa.Table.from_pydict({
            "_row": [json.dumps(r, default=str, sort_keys=True) for r in records],
            "_expectation": [",".join(e.name for e in reasons[i]) for i in rows],
            "_reason": [" AND ".join(e.sql for e in reasons[i]) for i in rows],
            "_source_position": [self.source_position] * len(rows),
            "_append_id": [self.append_id] * len(rows),
            "_quarantined_at": [now] * len(rows),
        }, schema=QUARANTINE_SCHEMA)


def _sample(batch: pa.RecordBatch, rows: list[int]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items()} for r in batch.take(pa.array(rows)).to_pylist()]
