"""Ids of schemas, partition specs and sort orders a commit adds, assigned as Iceberg does.

A client numbers what it adds from the metadata it last loaded. When another commit landed in
between (two REPLACE transactions racing, each adding sort order 1), the id it sent may
already name something else. Iceberg-Java's ``TableMetadata.Builder`` never trusts the
client's id: an added schema, spec or sort order equal to an existing one reuses that one's
id, anything else gets a fresh id; ``set-current-schema`` / ``set-default-spec`` /
``set-default-sort-order`` with ``-1`` ("the last added") or with the id the client gave the
added object follow it. pyiceberg instead refuses a taken id ("Sort-order with id 1 already
exists", a 400) or, for schemas, appends a second schema with the same id.

``renumber`` rewrites a commit's updates this way before pyiceberg applies them. One
difference from Java, on purpose: a client's id that is still free is kept (Java would pick
``max + 1``, which is the same id for every client numbering from fresh metadata).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    TableUpdate,
)

LAST_ADDED = -1
UNSORTED_ORDER_ID = 0  # Iceberg's unsorted order always has id 0


@dataclass
class _Ids:
    """What one kind of object (schemas, specs or sort orders) looks like during a commit."""

    taken: dict[int, tuple[object, ...]]  # id -> content key, of base and of earlier updates
    renamed: dict[int, int] = field(default_factory=dict)  # client's id -> id assigned
    last_added: int | None = None

    def assign(self, client_id: int, key: tuple[object, ...], fixed: int | None = None) -> tuple[int, bool]:
        """The id for an added object, and whether it is new (False: an equal one exists)."""
        same = next((i for i, k in self.taken.items() if k == key), None)
        if same is not None:
            assigned, new = same, False
        elif fixed is not None and fixed not in self.taken:
            assigned, new = fixed, True
        elif client_id not in self.taken and client_id >= 0:
            assigned, new = client_id, True
        else:
            assigned, new = max(self.taken, default=-1) + 1, True
        if new:
            self.taken[assigned] = key
        self.renamed[client_id] = assigned
        self.last_added = assigned
        return assigned, new

    def target(self, client_id: int) -> int:
        """The id a ``set-current`` / ``set-default`` update means."""
        if client_id == LAST_ADDED:
            return self.last_added if self.last_added is not None else LAST_ADDED
        return self.renamed.get(client_id, client_id)


def _schema_key(schema: Schema) -> tuple[object, ...]:
    return (tuple(schema.fields), tuple(sorted(schema.identifier_field_ids)))


def _spec_key(spec: PartitionSpec) -> tuple[object, ...]:
    return tuple(spec.fields)


def _order_key(order: SortOrder) -> tuple[object, ...]:
    return tuple(order.fields)


def renumber(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> tuple[TableUpdate, ...]:
    """``updates`` with the ids of added schemas, specs and sort orders assigned as Iceberg
    does, and the updates that select them pointing at the ids assigned. An added object equal
    to one the table has is dropped from the updates (its id is reused)."""
    return tuple(_renumbered(base, updates))


def _renumbered(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> Iterator[TableUpdate]:
    schemas = _Ids({s.schema_id: _schema_key(s) for s in base.schemas})
    specs = _Ids({s.spec_id: _spec_key(s) for s in base.partition_specs})
    orders = _Ids({o.order_id: _order_key(o) for o in base.sort_orders})
    for update in updates:
        if isinstance(update, AddSchemaUpdate):
            schema = update.schema_
            assigned, new = schemas.assign(schema.schema_id, _schema_key(schema))
            if new:
                yield update if assigned == schema.schema_id else AddSchemaUpdate(
                    schema=Schema(*schema.fields, schema_id=assigned,
                                  identifier_field_ids=list(schema.identifier_field_ids)))
        elif isinstance(update, AddPartitionSpecUpdate):
            spec = update.spec
            assigned, new = specs.assign(spec.spec_id, _spec_key(spec))
            if new:
                yield update if assigned == spec.spec_id else AddPartitionSpecUpdate(
                    spec=PartitionSpec(*spec.fields, spec_id=assigned))
        elif isinstance(update, AddSortOrderUpdate):
            order = update.sort_order
            fixed = UNSORTED_ORDER_ID if not order.fields else None
            assigned, new = orders.assign(order.order_id, _order_key(order), fixed)
            if new:
                yield update if assigned == order.order_id else AddSortOrderUpdate(  # type: ignore[call-arg]
                    sort_order=SortOrder(*order.fields, order_id=assigned))
        elif isinstance(update, SetCurrentSchemaUpdate):
            yield _retarget(update, "schema_id", schemas)
        elif isinstance(update, SetDefaultSpecUpdate):
            yield _retarget(update, "spec_id", specs)
        elif isinstance(update, SetDefaultSortOrderUpdate):
            yield _retarget(update, "sort_order_id", orders)
        else:
            yield update


def _retarget(update: TableUpdate, attribute: str, ids: _Ids) -> TableUpdate:
    client_id = getattr(update, attribute)
    assigned = ids.target(client_id)
    return update if assigned == client_id else update.model_copy(update={attribute: assigned})
