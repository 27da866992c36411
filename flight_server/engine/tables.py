"""Catalog tables as a query reads them, and how the names a query uses resolve to them."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from catalog.lineage.index import SCHEMAS
from flight_server.engine import history
from flight_server.engine.slots import CATALOG_NAME
from flight_server.engine.sql_text import split_namespace

# The lineage tables (catalog.lineage.index), read as pins of these kinds: icefloe.lineage.<name>.
LINEAGE_KINDS = tuple(f"lineage.{name}" for name in SCHEMAS)


@dataclass(frozen=True)
class PinnedTable:
    """A catalog table as one query reads it: namespace, name, snapshot (None = empty), schema.

    ``view`` is the name the query reads it by when that is not ``name`` (time travel:
    ``t@<snapshot id>``; metadata tables: ``t$snapshots``); ``kind`` is ``data`` or the
    metadata table kind (``snapshots``, ``history``, ``files``). ``split`` = (k, n): read only
    part k of the snapshot's data files dealt into n parts by bytes (one endpoint of a split scan).
    """

    namespace: tuple[str, ...]
    name: str
    snapshot_id: int | None
    schema_id: int
    view: str | None = None
    kind: str = "data"
    split: tuple[int, int] | None = None

    @property
    def view_name(self) -> str:
        return self.view or self.name

    def to_json(self) -> list[Any]:
        raw: list[Any] = [list(self.namespace), self.name, self.snapshot_id, self.schema_id]
        if self.view is not None or self.kind != "data" or self.split is not None:
            raw += [self.view, self.kind]
        if self.split is not None:
            raw.append(list(self.split))
        return raw

    @classmethod
    def from_json(cls, raw: list[Any]) -> PinnedTable:
        ns, name, snap, schema_id = raw[:4]
        view, kind = (raw[4], raw[5]) if len(raw) >= 6 else (None, "data")
        if kind != "data" and kind not in history.METADATA_KINDS and kind not in LINEAGE_KINDS:
            raise ValueError(kind)
        split = None
        if len(raw) >= 7:
            k, n = (int(v) for v in raw[6])
            if not 0 <= k < n:
                raise ValueError(raw[6])
            split = (k, n)
        return cls(tuple(str(p) for p in ns), str(name), None if snap is None else int(snap), int(schema_id),
                   None if view is None else str(view), str(kind), split)


def name_candidates(
    parts: tuple[str, ...], default_schema: tuple[str, ...] | None
) -> list[tuple[tuple[str, ...], str]]:
    """The (namespace, table) a name's parts may mean: ``t`` in the session schema, ``ns.t``
    and ``icefloe.ns.t`` (a multi-level namespace is one schema name holding dots)."""
    if len(parts) == 1:
        return [(default_schema, parts[0])] if default_schema else []
    if len(parts) == 3 and parts[0] == CATALOG_NAME:
        return [((*split_namespace(parts[1]),), parts[2])]
    return [((*split_namespace(parts[-2]),), parts[-1])] if len(parts) == 2 else []


# How many namespaces a "did you mean" search looks through (it runs only on a failed lookup).
_HINT_NAMESPACES = 500


def table_hint(catalog: Any, namespace: tuple[str, ...], table: str) -> str:
    """`` (did you mean ns.t?)`` for a table name that does not exist in ``namespace``: a close
    name there, else the same name (any case) or a close one in another namespace; else ''."""
    def names(ns: tuple[str, ...]) -> list[str]:
        try:
            return [t[-1] for t in catalog.list_tables(ns)]
        except Exception:  # a namespace that went away meanwhile: nothing to suggest from it
            return []

    close = difflib.get_close_matches(table, names(namespace), n=1)
    if close:
        return f" (did you mean {'.'.join((*namespace, close[0]))}?)"
    others: list[tuple[str, ...]] = []
    pending = [()]
    while pending and len(others) < _HINT_NAMESPACES:
        try:
            children = [tuple(n) for n in catalog.list_namespaces(pending.pop())]
        except Exception:
            continue
        others.extend(n for n in children if n != namespace)
        pending.extend(children)
    near: list[str] = []
    for ns in others[:_HINT_NAMESPACES]:
        found = names(ns)
        exact = [n for n in found if n.lower() == table.lower()]
        if exact:
            return f" (did you mean {'.'.join((*ns, exact[0]))}?)"
        near.extend(".".join((*ns, n)) for n in difflib.get_close_matches(table, found, n=1))
    best = difflib.get_close_matches(table, [n.rsplit(".", 1)[-1] for n in near], n=1)
    if best:
        return f" (did you mean {next(n for n in near if n.rsplit('.', 1)[-1] == best[0])}?)"
    return ""
