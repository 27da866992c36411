"""Backfill for the Postgres CDC connector: a key range of the source table read again.

``icefloe ingest backfill NAME --start LO --end HI`` re-reads the rows whose primary key is in
``[LO, HI]`` (both optional; a multi-column key takes JSON arrays) in key order, a page per
commit, all pages of a run from one ``REPEATABLE READ`` snapshot, and applies them **by key**
(as upserts, ``Op.UPDATE``): a row the target lost comes back, a row that differs takes the
source's value, a row that is the same stays the same. Rows the range no longer has at the
source are not deleted (the live stream deletes what the source deletes).

Its progress is a checkpoint of its own (the runner names it after the range): the live
checkpoint and the replication stream are not touched. Positions are ``bf:<run>:<json>``:
``after`` the last key taken, or ``done``; opening at a ``done`` position starts the next run
from the start of the range, so running the same backfill again reads the range again.

Why the target stays right: a backfill pass holds the connector's runner (``IngestRunner``
runs one pass at a time), so no live commit lands while its pages do; its snapshot is taken
after the live checkpoint's transactions committed, so what it writes is never older than
what the live stream already applied, and the stream, resuming at its checkpoint, re-applies
every later change on top in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from icefloe.ingest.contract import BackfillRange, Envelope, InvalidOptions, Op, SourceDataError
from icefloe.ingest.pgoutput import Relation, rows_table

PREFIX = "bf:"


class KeyRangeBackfill:
    """One backfill run's reader (the connector opens one per backfill pass)."""

    def __init__(self, relation: Relation, schema_name: str, key: tuple[str, ...], types: dict[str, str],
                 span: BackfillRange, position: str | None, page_rows: int) -> None:
        self.relation, self.schema_name, self.key, self.types = relation, schema_name, key, types
        self.low, self.high = _bound(span.start, key, "start"), _bound(span.end, key, "end")
        self.page_rows = page_rows
        self.run, self.after, self.done = 1, None, False
        if position is not None:
            if not position.startswith(PREFIX):
                raise SourceDataError(f"unreadable postgres backfill position {position[:40]!r}")
            run, _, state = position[len(PREFIX):].partition(":")
            if state == "done":
                self.run = int(run) + 1  # the range again, from its start
            else:
                self.run, self.after = int(run), json.loads(state)
        self.conn: Any = None

    def read(self, connect: Any, max_rows: int) -> Iterator[Envelope]:
        """Pages of the range after the position, then (once) the ``done`` position."""
        from psycopg import sql

        if self.done:
            return
        if self.conn is None:
            self.conn = connect()
        relation = self.relation
        limit = max(1, min(max_rows, self.page_rows))
        texts = sql.SQL(", ").join(sql.SQL("src.{}::text").format(sql.Identifier(c.name)) for c in relation.columns)
        keys = sql.SQL(", ").join(sql.SQL("src.{}").format(sql.Identifier(k)) for k in self.key)
        bound = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(self.types[k])) for k in self.key)
        query = sql.SQL("SELECT {} FROM {}.{} AS src WHERE true").format(
            texts, sql.Identifier(self.schema_name), sql.Identifier(relation.name))
        params: list[Any] = []
        for values, op in ((self.low, ">="), (self.high, "<="), (self.after, ">")):
            if values is not None:
                query += sql.SQL(" AND ({}) " + op + " ({})").format(keys, bound)
                params += list(values)
        # One row more than a page: a last page knows it is the last, so the ``done`` position
        # rides with rows (a position without rows is not committed).
        query += sql.SQL(" ORDER BY {} LIMIT {}").format(keys, sql.Literal(limit + 1))
        rows = self.conn.execute(query, params).fetchall()
        if len(rows) > limit:
            rows = rows[:limit]
            index = {c.name: i for i, c in enumerate(relation.columns)}
            self.after = [rows[-1][index[k]] for k in self.key]
            position = f"{PREFIX}{self.run}:{json.dumps(self.after, separators=(',', ':'))}"
        else:
            self.done = True
            position = f"{PREFIX}{self.run}:done"
            self.close()
        yield Envelope(rows_table(relation, rows), "", position, op=Op.UPDATE, key=self.key)

    def at(self, span: BackfillRange, position: str | None) -> bool:
        """Whether this reader is for ``span`` and exactly at ``position`` (then its snapshot
        goes on serving the run's next pages)."""
        here = None if self.after is None else f"{PREFIX}{self.run}:{json.dumps(self.after, separators=(',', ':'))}"
        return (not self.done and self.conn is not None and position == here
                and [_bound(span.start, self.key, "start"), _bound(span.end, self.key, "end")] == [self.low, self.high])

    def close(self) -> None:
        close_quietly(self.conn)  # a read-only transaction: nothing to keep
        self.conn = None


def close_quietly(conn: Any) -> None:
    """Close a psycopg connection that may be broken already (closing it can raise then)."""
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: S110 - closing a broken connection
            pass


def _bound(text: str | None, key: tuple[str, ...], which: str) -> list[Any] | None:
    """A range bound as the key's values (text, cast by the server to the key's types)."""
    if text is None:
        return None
    if len(key) == 1:
        return [text]
    try:
        values = json.loads(text)
    except ValueError:
        values = None
    if not isinstance(values, list) or len(values) != len(key):
        raise InvalidOptions(f"backfill --{which}: the key has {len(key)} columns {list(key)}; give a JSON array "
                             f"of {len(key)} values")
    return [None if v is None else str(v) for v in values]
