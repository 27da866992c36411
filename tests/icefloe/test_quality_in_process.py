"""The quality gate in an in-process lake (``icefloe.open``): appends and pipe sinks are checked
as on a server, and refusals reach the caller as icefloe errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import icefloe
from catalog.expectations import merge_summaries
from icefloe.errors import Error, InvalidArgument

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.int64())])


def test_in_process_appends_and_pipes_are_gated(tmp_path: Path) -> None:
    with icefloe.open(tmp_path / "wh") as lake:
        lake.create_namespace("ns")
        source = lake.create_table("ns.source", schema=SCHEMA)
        lake.create_table("ns.clean", schema=SCHEMA)
        catalog = lake.backend.catalog  # type: ignore[attr-defined]
        with catalog.load_table("ns.clean").transaction() as tx:
            tx.set_properties({"icefloe.expect.positive": "amount > 0"})
        with pytest.raises(InvalidArgument, match="'positive' \\(amount > 0\\) failed on 1 of 2 rows"):
            lake.table("ns.clean").append(pa.table({"id": [1, 2], "amount": [1, -1]}, SCHEMA))
        source.append(pa.table({"id": [1, 2], "amount": [3, -4]}, SCHEMA))
        with pytest.raises(Error, match="'positive'"):
            icefloe.pipe(source=source, sink=lake.table("ns.clean"), checkpoint="copy", once=True)
        assert lake.table("ns.clean").scan().to_table().num_rows == 0
        with catalog.load_table("ns.clean").transaction() as tx:
            tx.set_properties({"icefloe.expect.positive.on-failure": "quarantine"})
        icefloe.pipe(source=source, sink=lake.table("ns.clean"), checkpoint="copy", once=True)
        assert lake.table("ns.clean").scan().to_table().column("id").to_pylist() == [1]
        assert lake.table("ns.clean__quarantine").scan().to_table().column("_expectation").to_pylist() == [
            "positive"]


def test_a_group_commit_of_gated_appends_sums_their_results() -> None:
    one = {"append_id": "a", "quarantined_rows": 1, "assertions": [
        {"name": "p", "action": "quarantine", "kind": "custom_sql", "sql": "x > 0", "checked_rows": 3,
         "failed_rows": 1, "success": False}]}
    two = {"append_id": "b", "quarantined_rows": 0, "assertions": [
        {"name": "p", "action": "quarantine", "kind": "custom_sql", "sql": "x > 0", "checked_rows": 2,
         "failed_rows": 0, "success": True}]}
    merged = merge_summaries([one, two])
    assert merged["append_ids"] == ["a", "b"] and merged["quarantined_rows"] == 1
    (p,) = merged["assertions"]
    assert (p["checked_rows"], p["failed_rows"], p["success"]) == (5, 1, False)
