"""The quality gate's results reach OpenLineage as a ``dataQualityAssertions`` facet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from doput_client import do_put
from lineage_collector import Collector, validate_event
from servers import ServerProcess

from catalog import RocksCatalog


def test_gated_append_carries_data_quality_assertions(ol_env: Collector, warehouse: Path) -> None:
    cat = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        cat.create_namespace(("ns",))
        cat.create_table("ns.t", pa.schema([("id", pa.int64()), ("amount", pa.float64())]), properties={
            "icefloe.expect.positive": "amount > 0", "icefloe.expect.positive.on-failure": "quarantine",
            "icefloe.expect.unique_id": "unique(id)", "icefloe.expect.unique_id.on-failure": "warn"})
    finally:
        cat.close()
    proc = ServerProcess(warehouse, env={"OPENLINEAGE_URL": ol_env.url}).start()
    try:
        do_put(proc.location, ("ns", "t"), pa.table({"id": [1, 1, 2], "amount": [1.0, 2.0, -3.0]}))
        events = ol_env.wait_count(2 + 2 + 2)  # quarantine table create, append, quarantine append
    finally:
        assert proc.stop() == 0
    for event in events:
        validate_event(event)
    (complete,) = [e for e in events if e["eventType"] == "COMPLETE" and e["outputs"][0]["name"] == "ns.t"]
    facet = complete["outputs"][0]["facets"]["dataQualityAssertions"]
    assert facet["_schemaURL"].endswith("DataQualityAssertionsDatasetFacet.json#/$defs/"
                                        "DataQualityAssertionsDatasetFacet")
    by_name = {a["name"]: a for a in facet["assertions"]}
    assert by_name["positive"] == {"assertion": "custom_sql", "success": False, "name": "positive",
                                   "severity": "error", "content": "amount > 0", "contentType": "sql",
                                   "expected": "0 failing rows", "actual": "1 failing rows"}
    assert by_name["unique_id"]["assertion"] == "unique" and by_name["unique_id"]["severity"] == "warn"
    assert by_name["unique_id"]["success"] is False
