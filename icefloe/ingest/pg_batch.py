"""Whole source transactions of one Postgres table, folded per key into one unit of envelopes.

The streaming connector (``icefloe.ingest.postgres_cdc``) hands the runner a *batch*: every
transaction the stream delivered within the batch window (or up to ``max_rows`` changes), as
one unit the runner commits whole (``transaction_end`` only on its last envelope). Applying a
run of whole transactions by key only needs the last image of each key (its new row, or that it
is gone), so the batch keeps a dict from key to that image as the changes arrive, in Python,
and turns only the survivors into Arrow at the end: a thousand one-row transactions become two
small tables rather than a thousand. A TRUNCATE inside the batch empties everything before it,
and the unit then tells the sink to remove every target row first (``Op.TRUNCATE``).

Rows stay text (as ``pgoutput`` sends them) until the end; keys are compared as text, which is
exact because PostgreSQL prints one value one way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from icefloe.ingest.contract import Envelope, Op, SourceDataError
from icefloe.ingest.pgoutput import UNCHANGED, Change, Relation, relation_schema, rows_table

TRUNCATED = object()  # in a transaction's change list: TRUNCATE of the table at that point


@dataclass
class _Segment:
    """Changes made while the table had one shape (a column added at the source starts another)."""

    relation: Relation
    final: dict[tuple[Any, ...], tuple[bool, tuple[Any, ...]]] = field(default_factory=dict)  # key -> (gone, row)


class _Transactions:
    """What a batch knows of the whole source transactions it holds, in commit order: how many,
    the first and last xid, the last one's commit and end LSN, the checkpoint after it, and the
    earliest commit time (the unit's source time)."""

    def __init__(self) -> None:
        self.transactions = 0
        self.first_xid: int | None = None
        self.last_xid = 0
        self.commit_lsn = 0
        self.end_lsn = 0
        self.position = ""  # the checkpoint position after the last transaction added
        self.earliest_us: int | None = None

    def _note(self, xid: int, commit_lsn: int, end_lsn: int, commit_time_us: int, position: str) -> None:
        self.transactions += 1
        if self.first_xid is None:
            self.first_xid = xid
        self.last_xid, self.commit_lsn, self.end_lsn, self.position = xid, commit_lsn, end_lsn, position
        if self.earliest_us is None:
            self.earliest_us = commit_time_us

    def _label(self) -> str:
        """The unit's ``transaction``: first and last xid, and the last commit's LSN."""
        return f"{self.first_xid}..{self.last_xid}@{self.commit_lsn:X}"


class ChangeBatch(_Transactions):
    """Transactions added in commit order; ``envelopes`` gives the unit the runner commits."""

    def __init__(self, key: tuple[str, ...], table: str) -> None:
        super().__init__()
        self.key = key
        self.table = table
        self.segments: list[_Segment] = []
        self.truncated = False
        self.changes = 0

    def fits(self, relation: Relation | None) -> bool:
        """Whether a transaction whose first change is of ``relation`` may join this batch:
        rows of another table shape go to a batch (and commit) of their own."""
        return not self.segments or relation is None or self.segments[-1].relation == relation

    def add(self, xid: int, commit_lsn: int, end_lsn: int, commit_time_us: int, position: str,
            changes: list[tuple[Relation | None, Any]]) -> None:
        """One whole transaction's changes of the table (``(relation, Change)`` or
        ``(None, TRUNCATED)``), committed at ``commit_lsn``; ``position`` is the checkpoint
        after it."""
        for relation, change in changes:
            if change is TRUNCATED:
                self.segments, self.truncated = [], True
                continue
            assert relation is not None
            if not self.segments or self.segments[-1].relation != relation:
                self.segments.append(_Segment(relation))
            self._apply(self.segments[-1], relation, change)
        self.changes += len(changes)
        self._note(xid, commit_lsn, end_lsn, commit_time_us, position)

    def rows(self) -> int:
        return sum(len(s.final) for s in self.segments)

    def envelopes(self, inside: Callable[[int], str], empty: Relation) -> list[Envelope]:
        """The unit: per segment, the keys now gone (``Op.DELETE``) then the new images
        (``Op.UPDATE``), after an ``Op.TRUNCATE`` when the batch truncated the table. Positions
        inside the unit come from ``inside(n)`` (never a checkpoint: the runner commits units
        whole); the last envelope carries ``position``."""
        txn = self._label()
        parts: list[tuple[Op, pa.Table]] = []
        if self.truncated:
            parts.append((Op.TRUNCATE, relation_schema(empty).empty_table()))
        for segment in self.segments:
            gone = [row for deleted, row in segment.final.values() if deleted]
            kept = [row for deleted, row in segment.final.values() if not deleted]
            if gone:
                parts.append((Op.DELETE, rows_table(segment.relation, gone)))
            if kept:
                parts.append((Op.UPDATE, rows_table(segment.relation, kept)))
        if not parts:  # nothing for the table (transactions skipped or of other tables)
            return [Envelope(relation_schema(empty).empty_table(), "", self.position, transaction=txn,
                             source_time_us=self.earliest_us)]
        last = len(parts) - 1
        return [Envelope(rows, "", self.position if n == last else inside(n), op=op, key=self.key, transaction=txn,
                         transaction_end=n == last, source_time_us=self.earliest_us)
                for n, (op, rows) in enumerate(parts)]

    def _apply(self, segment: _Segment, relation: Relation, change: Change) -> None:
        key_at = [i for i, c in enumerate(relation.columns) if c.name in self.key]
        if change.kind == "insert":
            assert change.new is not None
            row = change.new
            segment.final[tuple(row[i] for i in key_at)] = (False, row)
            return
        if change.kind == "delete":
            assert change.old is not None
            row = change.old
            segment.final[tuple(row[i] for i in key_at)] = (True, row)
            return
        new, old = change.new, change.old
        assert new is not None
        if UNCHANGED in new:
            if old is None or change.old_is_key:
                # The value is not in the stream; the previous image in this batch may hold it.
                before = segment.final.get(tuple(new[i] for i in key_at))
                if before is None or before[0]:
                    raise SourceDataError(
                        f"an update of {self.table} left a large (TOASTed) value unchanged and the stream does not "
                        "carry it; run ALTER TABLE ... REPLICA IDENTITY FULL at the source")
                old = before[1]
            new = tuple(o if n is UNCHANGED else n for n, o in zip(new, old, strict=True))
        new_key = tuple(new[i] for i in key_at)
        if change.old is not None:
            old_key = tuple(change.old[i] for i in key_at)
            if old_key != new_key:  # the key itself changed: the old key's row goes
                segment.final[old_key] = (True, change.old)
        segment.final[new_key] = (False, new)


class TransactionBatch(_Transactions):
    """Whole source transactions over one or more tables of one stream: a ``ChangeBatch`` per
    table touched, and one unit for the runner holding every table's envelopes (labelled with
    the target table when the connector feeds several), so the runner lands a source
    transaction in every table at once (``catalog.keyed_tables``)."""

    def __init__(self, tables: dict[int, tuple[tuple[str, ...], str, str | None, Relation]]) -> None:
        super().__init__()
        # relation oid -> (key, "schema.table", target label or None, the table as described)
        self._tables = tables
        self._batches: dict[int, ChangeBatch] = {}

    def fits(self, changes: dict[int, list[tuple[Relation | None, Any]]]) -> bool:
        """Whether every table's first change of a transaction has the shape that table's batch
        holds (a column added at the source starts a new batch, as for one table)."""
        for oid, items in changes.items():
            batch = self._batches.get(oid)
            first = next((r for r, _ in items if r is not None), None)
            if batch is not None and not batch.fits(first):
                return False
        return True

    def add(self, xid: int, commit_lsn: int, end_lsn: int, commit_time_us: int, position: str,
            changes: dict[int, list[tuple[Relation | None, Any]]]) -> None:
        for oid, items in changes.items():
            if not items:
                continue
            batch = self._batches.get(oid)
            if batch is None:
                key, qualified, _label, _relation = self._tables[oid]
                batch = self._batches[oid] = ChangeBatch(key, qualified)
            batch.add(xid, commit_lsn, end_lsn, commit_time_us, position, items)
        self._note(xid, commit_lsn, end_lsn, commit_time_us, position)

    def rows(self) -> int:
        return sum(b.rows() for b in self._batches.values())

    def envelopes(self, inside: Callable[[int], str]) -> list[Envelope]:
        """The unit: each touched table's envelopes (``ChangeBatch.envelopes``), table after
        table; only the last ends the unit and carries ``position``."""
        txn = self._label()
        parts: list[Envelope] = []
        for oid, batch in self._batches.items():
            if not batch.segments and not batch.truncated:
                continue
            _key, _qualified, label, relation = self._tables[oid]
            parts.extend(replace(e, table=label) for e in batch.envelopes(lambda _n: "-", relation))
        if not parts:  # nothing for our tables (transactions skipped or of other tables)
            return [Envelope(pa.table({}), "", self.position, transaction=txn, source_time_us=self.earliest_us)]
        last = len(parts) - 1
        return [replace(e, position=self.position if n == last else inside(n), transaction=txn,
                        transaction_end=n == last, source_time_us=self.earliest_us) for n, e in enumerate(parts)]
