"""The tables a Postgres CDC connector replicates: options, and what the catalog says of them.

One connector reads one publication through one slot; it may replicate one table
(``table = "public.orders"``, into the connector's target) or several (``tables =
{"public.orders": "sales.orders", "public.items": "sales.items"}``, each into its own
target), so that a source transaction touching several of them lands in one catalog commit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from icefloe.ingest.contract import InvalidOptions, SourceDataError
from icefloe.ingest.pgoutput import Column, Relation

MAX_TABLES = 100
_TARGET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


@dataclass
class SourceTable:
    """One replicated table: its name at the source, its target (None: the connector's one
    table), and what ``describe`` found (the catalog's relation, key columns, column types)."""

    schema_name: str
    table_name: str
    target: str | None
    relation: Relation | None = None
    key: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.schema_name}.{self.table_name}"

    def described(self) -> Relation:
        assert self.relation is not None, "describe() first"
        return self.relation


def source_tables(options: Mapping[str, Any]) -> list[SourceTable]:
    """The tables of ``options``: ``table`` (one) or ``tables`` (source -> target ``ns.t``).

    Raises:
        InvalidOptions: Both or neither given, or a malformed mapping.
    """
    mapping = options.get("tables")
    if mapping is None:
        return [_split(str(options["table"]), None)]
    if options.get("table") not in (None, "-"):
        raise InvalidOptions("give the postgres source either 'table' (one table) or 'tables' "
                             "(source table -> target table), not both")
    if not isinstance(mapping, Mapping) or not mapping or len(mapping) > MAX_TABLES:
        raise InvalidOptions(f"option 'tables' must map 1 to {MAX_TABLES} source tables (schema.name) to "
                             "target tables (ns.t)")
    found: list[SourceTable] = []
    for source, target in mapping.items():
        if not isinstance(source, str) or not isinstance(target, str) or "." not in target \
                or not _TARGET.fullmatch(target):
            raise InvalidOptions(f"option 'tables': {source!r} -> {target!r} must map a source table to a target "
                                 "table ns.t")
        found.append(_split(source, target))
    if len({t.qualified for t in found}) != len(found) or len({t.target for t in found}) != len(found):
        raise InvalidOptions("option 'tables' names a source or target table twice")
    return found


def _split(name: str, target: str | None) -> SourceTable:
    schema, _, table = name.rpartition(".")
    return SourceTable(schema or "public", table, target)


def describe(conn: Any, table: SourceTable, publication: str) -> None:
    """Check the table, its key and that ``publication`` publishes it; fill in ``table``.

    Raises:
        SourceDataError: No such table, no key, or not published (the message says what to do).
    """
    qualified = table.qualified
    found = conn.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (table.schema_name, table.table_name)).fetchone()
    if found is None:
        raise SourceDataError(f"the source has no table {qualified}")
    oid, identity = int(found[0]), str(found[1])
    columns = conn.execute(
        "SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (oid,)).fetchall()
    index_kind = "indisprimary" if identity != "i" else "indisreplident"
    key = [r[0] for r in conn.execute(
        f"SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "  # noqa: S608
        f"AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.{index_kind} "
        "ORDER BY array_position(i.indkey::int2[], a.attnum)", (oid,)).fetchall()]
    if identity == "n" or (not key and identity != "f"):
        shown = {"d": "default", "n": "nothing", "i": "index"}.get(identity, identity)
        raise SourceDataError(
            f"table {qualified} has no primary key (replica identity {shown}), so its updates and deletes "
            f"cannot be applied by key; add a primary key or run ALTER TABLE {qualified} REPLICA IDENTITY FULL")
    table.key = tuple(key) if key else tuple(r[0] for r in columns)
    table.types = {r[0]: r[3] for r in columns}
    table.relation = Relation(oid, table.schema_name, table.table_name, identity,
                              tuple(Column(r[0], int(r[1]), int(r[2]), r[0] in table.key) for r in columns))
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is None:
        raise SourceDataError(f"publication {publication} does not exist at the source; create it: "
                              f"CREATE PUBLICATION {publication} FOR TABLE {qualified}")
    if conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                    (publication, table.schema_name, table.table_name)).fetchone() is None:
        raise SourceDataError(f"publication {publication} does not publish {qualified}; "
                              f"ALTER PUBLICATION {publication} ADD TABLE {qualified}")
