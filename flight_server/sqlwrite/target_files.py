"""The target table of a DELETE / UPDATE: its data files at the base snapshot the statement
reads (each one a source tagged ``__icefloe_file``), and the pins that read it there. Shared
by copy-on-write (``dml``) and merge-on-read (``mor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog.deletes import FileDeletes, plan_files
from catalog.sandbox import confine
from catalog.v3 import refuse_v3_write
from flight_server.engine import CATALOG_NAME, PinnedTable
from flight_server.engine.iceberg_source import quote
from flight_server.engine.pushdown import row_filter
from flight_server.sqlwrite.parse import TableName, bind_subset

if TYPE_CHECKING:
    from flight_server.sqlwrite.write import Write

TAG = "__icefloe_file"


def target_pin(table: Any, target: TableName) -> PinnedTable:
    snap = table.metadata.current_snapshot()
    return PinnedTable(target.namespace, target.name, snap.snapshot_id if snap else None,
                       table.metadata.current_schema_id)


def with_target(pins: list[PinnedTable], target_pin: PinnedTable) -> list[PinnedTable]:
    """``pins`` with the target table read at exactly ``target_pin`` (the commit's base)."""
    others = [p for p in pins if not (p.namespace == target_pin.namespace and p.name == target_pin.name
                                      and p.kind == "data" and p.view is None)]
    return [*others, target_pin]


class TargetFiles:
    """The target's data files at the base snapshot, and how many rows the condition selects in each."""

    def __init__(self, w: Write, table: Any, target: TableName, what: str, prune: str | None = None) -> None:
        self.table = table
        self.target = target
        self.base = target_pin(table, target)
        self.files: list[Any] = []
        # Files with row-level deletes (written by other engines): their reads apply the
        # deletes (engine.deletes), and their visible row count is not their record count.
        self.with_deletes: set[int] = set()
        # Data file path -> its deletes, handed to the engine's reads of these files (which
        # would otherwise plan the snapshot once more).
        self.deletes: dict[str, FileDeletes] = {}
        if self.base.snapshot_id is not None:
            refuse_v3_write(table.metadata, what)
            # ``prune`` (a WHERE condition): leave out files whose column bounds rule it out.
            found = row_filter(f"SELECT * FROM t WHERE {prune}", table.schema()) if prune is not None else None
            for planned in plan_files(table.metadata, table.io, self.base.snapshot_id, found):
                confine(table.io, planned.data_file.file_path)
                if planned.deletes:
                    for delete_file in planned.deletes.files():
                        confine(table.io, delete_file.file_path)
                    self.with_deletes.add(len(self.files))
                    self.deletes[planned.data_file.file_path] = planned.deletes
                self.files.append(planned.data_file)
        self.tags = {(target.namespace, target.name): [f.file_path for f in self.files]}

    def count_selected(self, w: Write, ref: str, cond: str | None) -> dict[int, int]:
        if not self.files:
            return {}
        if cond is None and not self.with_deletes:
            return {i: int(f.record_count) for i, f in enumerate(self.files)}
        where = f" WHERE {cond}" if cond is not None else ""
        sql, pins = w.engine.plan(f"SELECT {TAG}, count(*) FROM {ref}{where} GROUP BY 1", w.default_schema)
        self.pins = with_target(pins, self.base)
        sql, params = bind_subset(sql, w.params)
        counts = w.engine.query_table(sql, self.pins, w.default_schema, params, context=w.context,
                                      file_tags=self.tags, file_deletes=self.deletes)
        return {int(k): int(n) for k, n in zip(counts.column(0).to_pylist(), counts.column(1).to_pylist(),
                                                 strict=True) if n}

    def read(self, w: Write, query: str) -> pa.Table:
        sql, pins = w.engine.plan(query, w.default_schema)
        sql, params = bind_subset(sql, w.params)
        return w.engine.query_table(sql, with_target(pins, self.base), w.default_schema, params,
                                    context=w.context, file_tags=self.tags, file_deletes=self.deletes)


def view_sql(target: TableName) -> str:
    return f"{CATALOG_NAME}.{quote('.'.join(target.namespace))}.{quote(target.name)}"
