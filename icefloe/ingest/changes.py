"""Folding a run of CDC envelopes into what the target must end up with, per key.

A commit of a change-data-capture connector holds whole source transactions, each a sequence
of inserts, updates and deletes. What the target needs is only the last image of each key the
commit touched: the row (after an insert or update) or nothing (after a delete). The sink then
deletes every target row of those keys and appends the rows (``catalog.keyed_changes``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.ingest.contract import Envelope, Op, SourceDataError

_OP, _SEQ = "__icefloe_op", "__icefloe_seq"


def keyed(envelopes: Sequence[Envelope]) -> bool:
    """Whether ``envelopes`` are changes by key (a CDC source) rather than plain appends."""
    return any(e.key for e in envelopes)


def truncated(envelopes: Sequence[Envelope]) -> bool:
    """Whether the commit of ``envelopes`` starts by removing every target row (a TRUNCATE at
    the source; what came before it in the commit no longer matters)."""
    return any(e.op is Op.TRUNCATE for e in envelopes)


def fold(envelopes: Sequence[Envelope]) -> tuple[pa.Table, pa.Table, tuple[str, ...]]:
    """(upserts, removed keys, key columns) of ``envelopes``, in source order; only what
    follows the last ``Op.TRUNCATE`` counts (see ``truncated``).

    Raises:
        SourceDataError: The envelopes name different key columns, or rows lack them.
    """
    keys = {e.key for e in envelopes if e.key}
    if len(keys) != 1:
        raise SourceDataError(f"the changes of one commit name different key columns: {sorted(keys)}")
    key = next(iter(keys))
    last_truncate = max((n for n, e in enumerate(envelopes) if e.op is Op.TRUNCATE), default=-1)
    envelopes = envelopes[last_truncate + 1:] or envelopes[-1:]
    parts, seq = [], 0
    for envelope in envelopes:
        rows = envelope.rows
        if not rows.num_rows:
            continue
        missing = [k for k in key if k not in rows.column_names]
        if missing:
            raise SourceDataError(f"{envelope.op.value} rows lack key column(s) {missing}")
        n = rows.num_rows
        rows = rows.append_column(_OP, pa.array([envelope.op is Op.DELETE] * n, pa.bool_()))
        parts.append(rows.append_column(_SEQ, pa.array(range(seq, seq + n), pa.int64())))
        seq += n
    if not parts:
        empty = envelopes[0].rows.schema.empty_table()
        return empty, empty.select(list(key)), key
    every = pa.concat_tables(parts, promote_options="permissive")
    last = every.group_by(list(key)).aggregate([(_SEQ, "max")])
    final = every.filter(pc.is_in(every.column(_SEQ), value_set=last.column(f"{_SEQ}_max")))
    final = final.sort_by(_SEQ)
    deleted = final.column(_OP)
    upserts = final.filter(pc.invert(deleted)).drop_columns([_OP, _SEQ])
    removed = final.filter(deleted).select(list(key))
    return upserts, removed, key
