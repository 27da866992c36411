"""Statement checks and planning for the engine: one query inside the sandbox policy, its
tables pinned at snapshots, ``AT`` references rewritten, and its split into endpoints.

Parsing, policy checks and ``AT`` values run on cursors of the parser database (which never
sees a table), under the watchdog like execution: planning is bounded by the query timeout and
stops when the client cancels. Checked statements and short statements' parse trees are
remembered (drivers and dashboards send the same text again and again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import duckdb
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from catalog.lineage.index import NAMESPACE as LINEAGE_NAMESPACE
from catalog.lru import LockedLRU
from flight_server import errors
from flight_server.engine import history, messages, policy, splits, view_expansion
from flight_server.engine.iceberg_source import IcebergSources, quote
from flight_server.engine.origins import ColumnOrigin, Source, result_origins
from flight_server.engine.pushdown import row_filter
from flight_server.engine.runs import QueryRuns, run_failure
from flight_server.engine.slots import CATALOG_NAME, Slot
from flight_server.engine.table_reads import TableReads
from flight_server.engine.tables import LINEAGE_KINDS, PinnedTable, name_candidates, table_hint
from flight_server.engine.watchdog import Running, Watchdog
from flight_server.transactions import read_pins, staged_table

# How long a ticket's snapshots are kept from expiry after GetFlightInfo (see catalog.pins).
TICKET_PIN_S = 900.0
_READ_TYPES = {"SELECT", "EXPLAIN"}
# MULTI: one statement DuckDB expands into several (ALTER TABLE ... ADD COLUMN ... NOT NULL).
_WRITE_TYPES = {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "MERGE_INTO", "COPY", "MULTI"}
# The longest SQL statement accepted (the text; parameters are bound separately).
MAX_STATEMENT_BYTES = 1024 * 1024
# Queries that passed the policy recently (by hash of their SQL and pins): a DoGet right after
# its GetFlightInfo does not parse the same text again.
_CHECKED_CACHE = 4096
# Parse trees of recently planned statements up to this long (trees are ~20x their text).
_TREE_CACHE = 512
_TREE_CACHE_MAX_CHARS = 8192


class Kind:
    QUERY = "query"
    WRITE = "write"


class QueryPlanner:
    """Checks and plans statements for ``Engine`` (which delegates its statement methods here)."""

    def __init__(self, catalog: Any, parser: Slot, sources: IcebergSources, watchdog: Watchdog, runs: QueryRuns,
                 query_timeout_s: float, tables: TableReads) -> None:
        self.catalog = catalog
        self.tables = tables  # read-only tables by metadata version (planning itself loads afresh)
        self.sources = sources
        self.watchdog = watchdog
        self.runs = runs
        self.query_timeout_s = query_timeout_s
        self._parser = parser
        self._parser_cursors: queue.LifoQueue[duckdb.DuckDBPyConnection] = queue.LifoQueue()
        # Policy-checked queries (by _check_key) and where their result columns come from.
        self._checked: OrderedDict[bytes, list[ColumnOrigin | None]] = OrderedDict()
        self._trees: OrderedDict[tuple[str, str], policy.QueryTree] = OrderedDict()
        self._checked_lock = threading.Lock()
        # Statement types by text: one ADBC query asks for its statement's type four times
        # (CreatePreparedStatement, GetFlightInfo twice, DoGet), each a DuckDB parse.
        self._types: LockedLRU[str, str] = LockedLRU(_TREE_CACHE)
        # Whether a query reads nothing at all (no table, table function or CTE), by text.
        self._reads_nothing: LockedLRU[str, bool] = LockedLRU(_TREE_CACHE)

    def classify(self, sql: str) -> str:
        return Kind.QUERY if self._statement_type(sql) in _READ_TYPES else Kind.WRITE

    def is_explain(self, sql: str) -> bool:
        """Whether ``sql`` is an ``EXPLAIN [ANALYZE]`` (DuckDB's parser decides, not the text)."""
        return "explain" in sql.lower() and self._statement_type(sql) == "EXPLAIN"

    def reads_nothing(self, sql: str) -> bool:
        """Whether a checked query reads no table, table function or CTE anywhere (``SELECT 1``,
        ``SELECT now()``, ``VALUES (1)``): nothing DuckDB could run in parallel."""
        known = self._reads_nothing.get(sql)
        if known is not None:
            return known
        try:
            kind = self._statement_type(sql)
            tree = self._checked_tree(sql, kind, None) if kind == "SELECT" else None
        except errors.IcefloeError:
            return False  # the policy check that runs next says what is wrong with it
        answer = tree is not None and tree.statement is not None and not tree.tables and _reads_nothing(tree.statement)
        if len(sql) <= _TREE_CACHE_MAX_CHARS:
            self._reads_nothing.put(sql, answer)
        return answer

    def _statement_type(self, sql: str) -> str:
        """The DuckDB statement type of ``sql``, which must be exactly one read or write statement."""
        known = self._types.get(sql)
        if known is not None:
            return known
        if len(sql.encode("utf-8")) > MAX_STATEMENT_BYTES:
            raise errors.InvalidArgument(f"SQL statement too long (at most {MAX_STATEMENT_BYTES // 1024} KiB)")
        with self._parser_cursor() as cur:
            try:
                statements = cur.extract_statements(sql)
                if len(statements) != 1:
                    raise errors.InvalidArgument(f"expected exactly one SQL statement, got {len(statements)}")
                kind = statements[0].type.name
            except duckdb.Error as exc:
                raise messages.map_duckdb(exc) from None
            except ValueError:
                # A statement type the Python binding has no name for (UPDATE EXTENSIONS, ...).
                raise errors.InvalidArgument("this kind of statement is not allowed in icefloe SQL") from None
        if kind in _READ_TYPES or kind in _WRITE_TYPES:
            if len(sql) <= _TREE_CACHE_MAX_CHARS:
                self._types.put(sql, str(kind))
            return str(kind)
        raise errors.InvalidArgument(f"{kind} statements are not allowed")

    @contextlib.contextmanager
    def _parser_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the parser database, from a small pool: making one costs ~0.2 ms, more
        than splitting or parsing a statement. Parser cursors only split, parse and evaluate
        constants (no state outlives a call; an interrupt does not outlive its statement)."""
        try:
            cur = self._parser_cursors.get_nowait()
        except queue.Empty:
            cur = self._parser.cursor()
        try:
            yield cur
        finally:
            self._parser_cursors.put(cur)

    @contextlib.contextmanager
    def _planning(self, context: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        """A parser cursor under the watchdog: planning is bounded by the query timeout and
        stops when the client cancels, like execution."""
        with self._parser_cursor() as cur:
            run = Running(self._parser, cur, context, time.monotonic() + self.query_timeout_s)
            run.pooled = False
            self.watchdog.add(run)
            try:
                yield cur
            except duckdb.Error as exc:
                raise run_failure(run, self.query_timeout_s, exc) from None
            finally:
                self.runs.release(run)
        if run.interrupted:
            raise run_failure(run, self.query_timeout_s, duckdb.InterruptException("interrupted"))

    def check(self, sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable],
              cur: duckdb.DuckDBPyConnection | None = None) -> policy.QueryTree | None:
        """Refuse ``sql`` unless it is one query inside the sandbox policy whose every table
        reference is one of ``pins`` (or a CTE). Returns its tree (None: passed moments ago)."""
        key = _check_key(sql, default_schema, pins)
        with self._checked_lock:
            if key in self._checked:
                self._checked.move_to_end(key)
                return None
        kind = self._statement_type(sql)
        if kind not in _READ_TYPES:
            raise errors.InvalidArgument("this statement writes; send it as an update")
        if cur is None:
            with self._planning(None) as planning:
                tree = policy.check_query(planning, sql, explain=kind == "EXPLAIN")
        else:
            tree = policy.check_query(cur, sql, explain=kind == "EXPLAIN")
        known = {(p.namespace, p.view_name.lower()) for p in pins}
        for ref in tree.tables:
            if ref.at_unit is not None:
                raise errors.InvalidArgument("AT clauses are planned before a query runs")
            if not any((ns, name.lower()) in known for ns, name in name_candidates(ref.parts, default_schema)):
                raise self._missing_table(ref.parts, default_schema)
        self._remember(key, self._origins(tree, pins, default_schema))
        return tree

    def _remember(self, key: bytes, origins: list[ColumnOrigin | None]) -> None:
        with self._checked_lock:
            self._checked[key] = origins
            while len(self._checked) > _CHECKED_CACHE:
                self._checked.popitem(last=False)

    def column_origins(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> list[ColumnOrigin | None]:
        """The table column behind each result column of a planned query (None where a column
        is computed; an empty list when the query's columns cannot be traced).

        Remembered with the policy check, so a DoGet right after its GetFlightInfo finds them.
        """
        key = _check_key(sql, default_schema, pins)
        with self._checked_lock:
            found = self._checked.get(key)
        if found is None:
            self.check(sql, default_schema, pins)
            with self._checked_lock:
                found = self._checked.get(key, [])
        return found

    def _origins(
        self, tree: policy.QueryTree, pins: list[PinnedTable], default_schema: tuple[str, ...] | None
    ) -> list[ColumnOrigin | None]:
        if tree.statement is None:
            return []
        by_view = {(p.namespace, p.view_name.lower()): p for p in pins}

        def source(parts: tuple[str, ...], alias: str) -> Source | None:
            for ns, name in name_candidates(parts, default_schema):
                pin = by_view.get((ns, name.lower()))
                if pin is None or pin.kind != "data":
                    continue
                try:
                    table = self.tables.load(pin.namespace, pin.name)
                except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                    return None
                schema = table.schemas().get(pin.schema_id) or table.schema()
                return Source(alias, pin.namespace, pin.name, list(schema.fields), read_only=pin.view is not None)
            return None

        return result_origins(tree.statement, source)

    def plan(self, sql: str, default_schema: tuple[str, ...] | None,
             context: Any = None) -> tuple[str, list[PinnedTable]]:
        """A query ready to run: ``sql`` with time-travel references rewritten, and its pins.

        Raises:
            errors.InvalidArgument: Not one query, a bad ``AT`` clause, or too long.
            errors.PermissionDenied: Outside the sandbox policy.
            errors.NotFound: A table it names does not exist.
            errors.DeadlineExceeded: Planning took longer than the query timeout.
        """
        # Every table this statement names is pinned from one moment of the catalog: a
        # multi-table commit is seen whole or not at all (never one table with it, one without).
        with consistent_reads(self.catalog):
            sql = view_expansion.expand(self.catalog, sql, default_schema)  # Iceberg views: their SQL, inline
            kind = self._statement_type(sql)
            if kind not in _READ_TYPES:
                raise errors.InvalidArgument("this statement writes; send it as an update")
            tree = self._checked_tree(sql, kind, context)
            refs: list[history.AtReference] = []
            if any(ref.at_unit is not None for ref in tree.tables):
                with self._planning(context) as cur:  # AT values are evaluated at each planning
                    refs = history.resolve_at_references(cur, self.catalog, tree.tables, default_schema)
            rewritten = history.rewrite(sql, refs, quote, CATALOG_NAME) if refs else sql
            pins = {(r.namespace, history.at_view_name(r.name, r.snapshot_id)):
                    PinnedTable(r.namespace, r.name, r.snapshot_id, r.schema_id,
                                view=history.at_view_name(r.name, r.snapshot_id)) for r in refs}
            for ref in tree.tables:
                if ref.at_unit is not None:
                    continue
                for ns, table in name_candidates(ref.parts, default_schema):
                    if (ns, table) in pins:
                        break
                    pin = self._pin_one(ns, table)
                    if pin is not None:
                        pins[(ns, table)] = pin
                        break
                else:
                    raise self._missing_table(ref.parts, default_schema)
            # Inside a transaction: its snapshots at BEGIN, and its own staged writes.
            planned = read_pins(self.catalog, list(pins.values()))
        registry = getattr(self.catalog, "pins", None)
        if registry is not None:
            # The ticket's DoGet must still find these snapshots, whatever commits meanwhile.
            for pin in planned:
                if pin.snapshot_id is not None:
                    registry.pin(pin.namespace, pin.name, pin.snapshot_id, TICKET_PIN_S)
        if refs:
            # The rewritten text must pass the same policy with exactly these pins: it is what a
            # ticket will carry and DoGet will run.
            self.check(rewritten, default_schema, planned)
        else:  # just checked, as is
            self._remember(_check_key(rewritten, default_schema, planned), self._origins(tree, planned, default_schema))
        return rewritten, planned

    def _checked_tree(self, sql: str, kind: str, context: Any) -> policy.QueryTree:
        """The policy-checked parse tree of a query; short statements' trees are remembered
        (dashboards and drivers send the same text again and again)."""
        key = (sql, kind)
        with self._checked_lock:
            tree = self._trees.get(key)
            if tree is not None:
                self._trees.move_to_end(key)
                return tree
        with self._planning(context) as cur:
            tree = policy.check_query(cur, sql, explain=kind == "EXPLAIN")
        if len(sql) <= _TREE_CACHE_MAX_CHARS:
            with self._checked_lock:
                self._trees[key] = tree
                while len(self._trees) > _TREE_CACHE:
                    self._trees.popitem(last=False)
        return tree

    def split(
        self, sql: str, pins: list[PinnedTable], default_schema: tuple[str, ...] | None,
        target_bytes: int, max_partitions: int,
    ) -> list[list[PinnedTable]]:
        """The pins of each endpoint of a planned query: several when it is a row-wise scan of
        one table whose data files (after manifest pruning) exceed ``target_bytes``, else one.

        Planned from manifests only; each endpoint's pins name part k of n (``splits``).
        """
        data = [p for p in pins if p.kind == "data"]
        if len(pins) != 1 or len(data) != 1 or data[0].snapshot_id is None or max_partitions <= 1:
            return [pins]
        kind = self._statement_type(sql)
        if kind != "SELECT" or not splits.splittable(self._checked_tree(sql, kind, None).statement):
            return [pins]
        pin = data[0]
        snapshot_id = pin.snapshot_id
        assert snapshot_id is not None  # checked above
        # A transaction's own writes: its staged metadata.
        table = staged_table(self.catalog, pin.namespace, pin.name) or self.tables.load(pin.namespace, pin.name)
        schema = table.schemas().get(pin.schema_id) or table.schema()
        units = splits.scan_units(self.sources.data_files(table, snapshot_id, row_filter(sql, schema)))
        n = splits.partition_count(sum(u.bytes for u in units), len(units), target_bytes, max_partitions)
        if n <= 1:
            return [pins]
        return [[dataclasses.replace(pin, split=(k, n))] for k in range(n)]

    def _missing_table(self, parts: tuple[str, ...], default_schema: tuple[str, ...] | None) -> Exception:
        """NOT_FOUND for a name that is no icefloe table, suggesting only icefloe tables."""
        name = messages.scrub(".".join(parts))
        if len(parts) == 1 and not default_schema:
            return errors.NotFound(f"table {name} does not exist (name its namespace: ns.{name})")
        candidates = name_candidates(parts, default_schema)
        hint = ""
        if candidates:
            ns, table = candidates[0]
            hint = table_hint(self.catalog, ns, table)
        return errors.NotFound(f"table {name} does not exist{hint}")

    def _pin_one(self, ns: tuple[str, ...], table: str) -> PinnedTable | None:
        try:
            tbl = self.catalog.load_table((*ns, table))
            kind, view = "data", None
        except (NoSuchTableError, NoSuchNamespaceError, ValueError):
            meta = history.metadata_table_name(table)
            if meta is None:
                if ns == LINEAGE_NAMESPACE and f"lineage.{table}" in LINEAGE_KINDS:  # a lineage table
                    return PinnedTable(ns, table, None, 0, None, f"lineage.{table}")
                return None
            try:
                tbl = self.catalog.load_table((*ns, meta[0]))
            except (NoSuchTableError, NoSuchNamespaceError, ValueError):
                return None
            kind, view, table = meta[1], table, meta[0]
        snap = tbl.metadata.current_snapshot()
        return PinnedTable(ns, table, snap.snapshot_id if snap else None, tbl.metadata.current_schema_id, view, kind)


def consistent_reads(catalog: Any) -> contextlib.AbstractContextManager[None]:
    """The catalog's consistent-read block, where it has one (``RocksCatalog``)."""
    block = getattr(catalog, "consistent_reads", None)
    return block() if block is not None else contextlib.nullcontext()


# FROM clauses that read nothing: none at all, a VALUES list, a subquery (whose own FROM is looked at).
_NOTHING_READ = frozenset({"EMPTY", "EXPRESSION_LIST", "SUBQUERY"})


def _reads_nothing(node: Any) -> bool:
    """No FROM clause anywhere in DuckDB's tree ``node`` reads a table, function or CTE."""
    if isinstance(node, dict):
        source = node.get("from_table")
        if isinstance(source, dict) and source.get("type") not in _NOTHING_READ:
            return False
        return all(_reads_nothing(v) for v in node.values() if isinstance(v, (dict, list)))
    if isinstance(node, list):
        return all(_reads_nothing(v) for v in node if isinstance(v, (dict, list)))
    return True


def _check_key(sql: str, default_schema: tuple[str, ...] | None, pins: list[PinnedTable]) -> bytes:
    spec = repr((sql, default_schema, sorted((p.namespace, p.view_name) for p in pins)))
    return hashlib.blake2b(spec.encode(), digest_size=16).digest()
