"""Sample warehouse for the Flight SQL tests, written through the catalog before a server starts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.types import LongType


def make_sample_warehouse(warehouse: Path) -> None:
    """Tables written through pyiceberg with the RocksCatalog in-process, then closed.

    - ``sales.orders``: two appends (two snapshots);
    - ``sales.evolved``: a rename and an added column between appends (field ids matter);
    - ``sales.empty``: no snapshot at all; ``analytics.daily.visits``: a two-level namespace.
    """
    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("sales")
        orders = cat.create_table(
            "sales.orders",
            pa.schema(
                [pa.field("id", pa.int64()), pa.field("customer", pa.string()), pa.field("amount", pa.float64())]
            ),
        )
        orders.append(
            pa.table(
                {"id": [1, 2, 3], "customer": ["ann", "bob", "cy"], "amount": [10.0, 20.5, 30.25]},
                schema=orders.schema().as_arrow(),
            )
        )
        orders = cat.load_table("sales.orders")
        orders.append(pa.table({"id": [4], "customer": ["dee"], "amount": [4.0]}, schema=orders.schema().as_arrow()))

        evolved = cat.create_table("sales.evolved", pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())]))
        evolved.append(pa.table({"a": [1, 2], "b": ["x", "y"]}, schema=evolved.schema().as_arrow()))
        evolved = cat.load_table("sales.evolved")
        with evolved.update_schema() as upd:
            upd.rename_column("b", "label")
            upd.add_column("c", LongType())
        evolved = cat.load_table("sales.evolved")
        evolved.append(pa.table({"a": [3], "label": ["z"], "c": [30]}, schema=evolved.schema().as_arrow()))

        cat.create_table("sales.empty", pa.schema([pa.field("k", pa.int32())]))
        cat.create_namespace(("analytics",))
        cat.create_namespace(("analytics", "daily"))
        visits = cat.create_table(("analytics", "daily", "visits"), pa.schema([pa.field("n", pa.int64())]))
        visits.append(pa.table({"n": [7, 8]}, schema=visits.schema().as_arrow()))
    finally:
        cat.close()
