"""Lineage wired into the server: in-process servers writing through their catalog, and real
server processes started with the OpenLineage environment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from lineage_collector import Collector, validate_event
from servers import ServerProcess

from flight_server.config import Config
from flight_server.server import IcefloeServer

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def servers() -> Iterator[list[IcefloeServer]]:
    started: list[IcefloeServer] = []
    yield started
    for server in started:
        if not server.stopping.is_set():
            server.shutdown_and_close()


def _start(servers: list[IcefloeServer], warehouse: Path, **config: object) -> IcefloeServer:
    server = IcefloeServer(Config(warehouse=str(warehouse), port=0, **config))  # type: ignore[arg-type]
    servers.append(server)
    return server


def test_server_exports_its_commits(ol_env: Collector, servers: list[IcefloeServer], warehouse: Path) -> None:
    server = _start(servers, warehouse)
    assert server.lineage.enabled
    cat = server.catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA))
    events = ol_env.wait_count(4)
    namespace = f"icefloe://127.0.0.1:{server.port}"  # the default: derived from the server
    for event in events:
        validate_event(event)
        assert event["job"]["namespace"] == namespace
        out = event["outputs"][0]
        assert (out["namespace"], out["name"]) == (namespace, "ns.t")
        assert out["facets"]["catalog"]["metadataUri"] == f"grpc://127.0.0.1:{server.port}"
        assert out["facets"]["catalog"]["warehouseUri"] == str(warehouse.resolve())
        engine = event["run"]["facets"]["processing_engine"]
        assert engine["name"] == "icefloe" and engine["version"] and engine["openlineageAdapterVersion"]


def test_collector_down_server_restart_collector_up(
    ol_env: Collector, servers: list[IcefloeServer], warehouse: Path
) -> None:
    ol_env.down()
    server = _start(servers, warehouse, lineage_namespace="prod")
    cat = server.catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    for i in range(4):
        table.append(pa.table({"id": [i], "v": [str(i)]}, schema=SCHEMA))
    head = cat.log.head()
    server.shutdown_and_close()  # events not yet delivered stay in the outbox

    ol_env.up()
    server = _start(servers, warehouse, lineage_namespace="prod")
    events = ol_env.wait_count(2 * head)
    server.catalog.load_table("ns.t").append(pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA))
    events = ol_env.wait_count(2 * head + 2)
    server.shutdown_and_close()
    counts = Counter((e["run"]["runId"], e["eventType"]) for e in events)
    assert len(counts) == 2 * (head + 1) and set(counts.values()) == {1}
    seqs = sorted(e["run"]["facets"]["icefloe_commit"]["seq"] for e in events if e["eventType"] == "COMPLETE")
    assert seqs == list(range(1, head + 2))
    for event in events:
        validate_event(event)
        assert event["job"]["namespace"] == "prod"


def test_hashed_names_by_config(ol_env: Collector, servers: list[IcefloeServer], warehouse: Path) -> None:
    server = _start(servers, warehouse, lineage_namespace="prod", lineage_hash_names=True)
    server.catalog.create_namespace("hr")
    server.catalog.create_table("hr.salaries", SCHEMA)
    ol_env.wait_count(2)
    assert all(b"salaries" not in body for body in ol_env.raw_bodies)


def _wait_log(proc: ServerProcess, text: str, timeout: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in proc.log:
            return True
        time.sleep(0.05)
    return False


def test_server_process_with_lineage_on(ol_env: Collector, warehouse: Path) -> None:
    proc = ServerProcess(
        warehouse, ["--lineage-namespace", "prod", "--lineage-hash-names"], env={"OPENLINEAGE_URL": ol_env.url}
    ).start()
    try:
        assert _wait_log(proc, "lineage export on: http transport, namespace prod"), proc.log
        client = flight.connect(proc.location)
        client.list_actions()  # the server answers
        client.close()
    finally:
        assert proc.stop() == 0


def test_server_process_with_broken_config_disables_export_loudly(
    ol_env: Collector, warehouse: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "openlineage.yml"
    bad.write_text("transport: {type: http, url: [")
    proc = ServerProcess(warehouse, env={"OPENLINEAGE_URL": ol_env.url, "OPENLINEAGE_CONFIG": str(bad)}).start()
    try:
        assert _wait_log(
            proc, "ERROR icefloe.lineage: lineage export DISABLED: OpenLineage config file cannot be parsed"
        ), proc.log
        client = flight.connect(proc.location)
        client.list_actions()
        client.close()
    finally:
        code = proc.stop()
        assert code == 0, proc.log
    assert ol_env.snapshot() == [], ol_env.snapshot()
