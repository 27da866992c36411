"""Multi-endpoint scans: a row-wise scan of one table answers several endpoints, disjoint groups
of the pinned snapshot's data files, that together return exactly the single-stream rows.

The tests marked ``ON_BOTH_STORAGES`` also run over an S3 warehouse (the module's server once
per storage): split endpoints read ranges of objects, row groups of one object and the pinned
snapshot's files from the store."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flightsql_wire import statement_query
from servers import ServerProcess
from storage_kinds import Warehouse, fresh_warehouse, open_catalog, start_server

TARGET = b"icefloe.scan.target-partition-bytes"
MAX = b"icefloe.scan.max-partitions"
ON_BOTH_STORAGES = pytest.mark.parametrize("split_storage", ["local", "s3"], indirect=True)
# The other tests name the local server's parameter too, so they share its one server.
LOCAL = pytest.mark.parametrize("split_storage", ["local"], indirect=True)


def _make(warehouse: Warehouse) -> None:
    cat = open_catalog(warehouse, "t")
    try:
        cat.create_namespace("ns")
        schema = pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())])
        cat.create_table("ns.plain", schema)
        for i in range(6):
            table = cat.load_table("ns.plain")
            table.append(pa.table({"x": pa.array(range(i * 100, i * 100 + 100), pa.int64()),
                                   "s": [f"r{i}-{j}" for j in range(100)]}))
        # One data file of 10 row groups: split by row group (split_offsets from the manifest).
        big = cat.create_table("ns.big", schema, properties={"write.parquet.row-group-limit": "1000"})
        big.append(pa.table({"x": pa.array(range(10_000), pa.int64()), "s": [f"b{j % 97}" for j in range(10_000)]}))
        from pyiceberg.transforms import BucketTransform

        parted = cat.create_table("ns.parted", schema)
        with parted.update_spec() as update:
            update.add_identity("s")
            update.add_field("x", BucketTransform(4), "x_bucket")
        for i in range(3):
            parted = cat.load_table("ns.parted")
            parted.append(pa.table({"x": pa.array(range(i * 50, i * 50 + 50), pa.int64()),
                                    "s": [f"p{j % 3}" for j in range(50)]}))
        evolved = cat.create_table("ns.evolved", schema)
        evolved.append(pa.table({"x": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
        evolved = cat.load_table("ns.evolved")
        with evolved.update_schema() as update:
            update.rename_column("s", "label")
            update.add_column("y", pa_type_long())
        evolved = cat.load_table("ns.evolved")
        evolved.append(pa.table({"x": pa.array([3], pa.int64()), "label": ["c"], "y": pa.array([30], pa.int64())},
                                schema=evolved.schema().as_arrow()))
    finally:
        cat.close()


def pa_type_long() -> Any:
    from pyiceberg.types import LongType

    return LongType()


@pytest.fixture(scope="module")
def split_storage(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="module")
def server(split_storage: str, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    warehouse = fresh_warehouse(split_storage, tmp_path_factory.mktemp("splits"), request)
    _make(warehouse)
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
    assert "Traceback" not in proc.log, proc.log[-4000:]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[flight.FlightClient]:
    connection = flight.FlightClient(server.location)
    yield connection
    connection.close()


def _split(client: flight.FlightClient, sql: str, target: bytes = b"1", most: bytes = b"64") -> flight.FlightInfo:
    options = flight.FlightCallOptions(headers=[(TARGET, target), (MAX, most)])
    return client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)), options)


def _rows(client: flight.FlightClient, info: flight.FlightInfo) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for endpoint in info.endpoints:
        out.extend(client.do_get(endpoint.ticket).read_all().to_pylist())
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


@ON_BOTH_STORAGES
@pytest.mark.parametrize("sql", [
    "SELECT * FROM ns.plain",
    "SELECT x, upper(s) AS u FROM ns.plain WHERE x % 7 = 1",
    "SELECT s FROM ns.plain WHERE x BETWEEN 150 AND 420",
    "SELECT * FROM ns.evolved",
    "SELECT label, y FROM ns.evolved WHERE x > 1",
    "SELECT * FROM ns.big",
    "SELECT x FROM ns.big WHERE s = 'b5'",
    "SELECT * FROM ns.parted",
    "SELECT x FROM ns.parted WHERE s = 'p1'",
])
def test_split_scan_returns_exactly_the_single_stream_rows(client: flight.FlightClient, sql: str) -> None:
    single = _split(client, sql, most=b"1")
    assert len(single.endpoints) == 1
    split = _split(client, sql)
    assert len(split.endpoints) > 1 and not split.ordered
    assert split.schema.equals(single.schema, check_metadata=True)
    assert _rows(client, split) == _rows(client, single)
    for endpoint in split.endpoints:
        assert list(endpoint.locations) == []  # "this server"


@ON_BOTH_STORAGES
def test_endpoints_read_in_parallel_threads(server: ServerProcess, client: flight.FlightClient) -> None:
    info = _split(client, "SELECT * FROM ns.plain", most=b"4")
    assert len(info.endpoints) == 4
    results: list[pa.Table] = []
    lock = threading.Lock()

    def read(ticket: flight.Ticket) -> None:
        own = flight.FlightClient(server.location)
        table = own.do_get(ticket).read_all()
        with lock:
            results.append(table)
        own.close()

    threads = [threading.Thread(target=read, args=(e.ticket,)) for e in info.endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(t.num_rows for t in results) == 600
    xs = sorted(x for t in results for x in t.column("x").to_pylist())
    assert xs == list(range(600))
    assert all(t.num_rows > 0 for t in results), "balanced by bytes: no empty part"


@LOCAL
@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM ns.plain",
    "SELECT x FROM ns.plain ORDER BY x",
    "SELECT x FROM ns.plain LIMIT 5",
    "SELECT DISTINCT s FROM ns.plain",
    "SELECT x, sum(x) OVER () FROM ns.plain",
    "SELECT a.x FROM ns.plain a JOIN ns.plain b ON a.x = b.x",
    "WITH c AS (SELECT * FROM ns.plain) SELECT * FROM c",
    "SELECT x FROM ns.plain WHERE x IN (SELECT x FROM ns.plain WHERE x < 3)",
    "SELECT s, count(*) FROM ns.plain GROUP BY s",
    "SELECT 1",
])
def test_queries_that_are_not_row_wise_keep_one_endpoint(client: flight.FlightClient, sql: str) -> None:
    info = _split(client, sql)
    assert len(info.endpoints) == 1


@LOCAL
def test_default_target_keeps_small_tables_in_one_endpoint(client: flight.FlightClient) -> None:
    info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT * FROM ns.plain")))
    assert len(info.endpoints) == 1  # 6 small files, far below 128 MiB


@LOCAL
def test_bad_scan_options_are_invalid_argument(client: flight.FlightClient) -> None:
    for target, most in ((b"0", b"4"), (b"-5", b"4"), (b"lots", b"4"), (b"1", b"0"), (b"1", b"1e3")):
        with pytest.raises(pa.ArrowInvalid, match="icefloe.scan"):
            _split(client, "SELECT * FROM ns.plain", target, most)


@ON_BOTH_STORAGES
def test_adbc_partitions_through_session_options(server: ServerProcess) -> None:
    kwargs = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}
    with flight_sql.connect(server.location, autocommit=True, db_kwargs=kwargs) as conn:
        conn.adbc_connection.set_options(**{
            "adbc.flight.sql.session.option.icefloe.scan.target-partition-bytes": "1",
            "adbc.flight.sql.session.option.icefloe.scan.max-partitions": "3",
        })
        with conn.cursor() as cur:
            partitions, schema = cur.adbc_execute_partitions("SELECT x FROM ns.plain WHERE x >= 100")
            assert len(partitions) == 3 and schema.names == ["x"]
            xs: list[int] = []
            for partition in partitions:
                cur.adbc_read_partition(partition)
                xs.extend(cur.fetch_arrow_table().column("x").to_pylist())
        assert sorted(xs) == list(range(100, 600))


def test_advertised_uris_are_the_endpoint_locations(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    _make(warehouse)
    fleet = ["grpc://icefloe-a.example:31337", "grpc://icefloe-b.example:31337"]
    proc = ServerProcess(warehouse, [arg for uri in fleet for arg in ("--advertise-uri", uri)]).start()
    try:
        client = flight.FlightClient(proc.location)
        info = _split(client, "SELECT * FROM ns.plain", most=b"2")
        assert len(info.endpoints) == 2
        for endpoint in info.endpoints:
            assert [loc.uri.decode() for loc in endpoint.locations] == fleet
        assert _rows(client, info) == _rows(client, _split(client, "SELECT * FROM ns.plain", most=b"1"))
        client.close()
    finally:
        proc.stop()


@ON_BOTH_STORAGES
def test_split_after_compaction_reads_the_pinned_snapshot(client: flight.FlightClient) -> None:
    """A split ticket names part k of the pinned snapshot's files: compaction in between
    changes the current files, not what the ticket reads."""
    info = _split(client, "SELECT x FROM ns.plain", most=b"3")
    before = _rows(client, info)
    body = json.dumps({"table": "ns.plain", "orphan_grace_s": 3600}).encode()
    list(client.do_action(flight.Action("icefloe.maintain", body)))
    assert _rows(client, info) == before
    after = _split(client, "SELECT x FROM ns.plain")
    assert _rows(client, after) == before


@ON_BOTH_STORAGES
def test_one_large_file_splits_by_row_group(client: flight.FlightClient) -> None:
    split = _split(client, "SELECT * FROM ns.big")
    assert _live_file_count(client, "big") == 1
    assert len(split.endpoints) == 10, "one endpoint per row group of the one file"
    counts = [client.do_get(e.ticket).read_all().num_rows for e in split.endpoints]
    assert counts == [1000] * 10
    capped = _split(client, "SELECT * FROM ns.big", most=b"3")
    assert len(capped.endpoints) == 3
    assert sorted(r["x"] for r in _rows(client, capped)) == list(range(10_000))


def _live_file_count(client: flight.FlightClient, table: str) -> int:
    info = client.get_flight_info(flight.FlightDescriptor.for_command(
        statement_query(f'SELECT count(*) AS n FROM ns."{table}$files"')))
    return int(client.do_get(info.endpoints[0].ticket).read_all().column("n")[0].as_py())
