"""pyiceberg's own ``RestCatalog`` against ``icefloe serve --rest-port``: namespaces, tables,
appends, overwrites, schema evolution, partition specs, time travel, concurrent commits, drop
and rename; every table visible at once over Flight SQL and every commit on the feed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url, sql
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("rest") / "wh") as proc:
        yield proc


@pytest.fixture
def rest(server: ServerProcess) -> RestCatalog:
    return RestCatalog("icefloe", uri=rest_url(server))


def test_load_table_hands_out_file_uris(server: ServerProcess, rest: RestCatalog) -> None:
    """The server was started on a plain path: LoadTable's metadata location, the table
    location and the file locations it wrote are file:// URIs, for tables created over REST
    and over Flight SQL alike (engines and pyiceberg expect the scheme)."""
    warehouse = f"file://{server.warehouse.resolve()}"
    rest.create_namespace("uris")
    rest.create_table("uris.by_rest", Schema(NestedField(1, "id", LongType())))
    sql(server.location, "CREATE TABLE uris.by_sql (id BIGINT)")
    sql(server.location, "INSERT INTO uris.by_sql VALUES (1)")
    for name in ("by_rest", "by_sql"):
        answer = httpx.get(f"{rest_url(server)}/v1/namespaces/uris/tables/{name}", timeout=10).json()
        assert answer["metadata-location"].startswith(f"{warehouse}/uris/{name}/metadata/"), answer
        assert answer["metadata"]["location"] == f"{warehouse}/uris/{name}"
    table = rest.load_table("uris.by_sql")
    assert all(t.file.file_path.startswith(f"{warehouse}/uris/by_sql/data/") for t in table.scan().plan_files())
    assert table.scan().to_arrow()["id"].to_pylist() == [1]


def test_config_names_the_warehouse_and_the_endpoints(server: ServerProcess) -> None:
    config = httpx.get(f"{rest_url(server)}/v1/config", timeout=10).json()
    # A local warehouse is named as its file:// URI, as every location the catalog hands out.
    assert config["overrides"]["warehouse"] == f"file://{server.warehouse.resolve()}"
    assert "POST /v1/{prefix}/transactions/commit" in config["endpoints"]
    assert "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}" in config["endpoints"]
    for spelling in (str(server.warehouse), f"file://{server.warehouse.resolve()}"):
        ours = httpx.get(f"{rest_url(server)}/v1/config", params={"warehouse": spelling}, timeout=10)
        assert ours.status_code == 200, spelling
    for elsewhere in ("/elsewhere", "file:///elsewhere", f"file://otherhost{server.warehouse.resolve()}",
                      f"{server.warehouse.resolve()}/../x"):
        other = httpx.get(f"{rest_url(server)}/v1/config", params={"warehouse": elsewhere}, timeout=10)
        assert other.status_code == 400 and other.json()["error"]["type"] == "BadRequestException", elsewhere


def test_namespaces(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("nsa", {"owner": "ann"})
    rest.create_namespace(("nsa", "inner"))
    with pytest.raises(NamespaceAlreadyExistsError):
        rest.create_namespace("nsa")
    assert ("nsa",) in rest.list_namespaces()
    assert rest.list_namespaces("nsa") == [("nsa", "inner")]
    assert rest.load_namespace_properties("nsa") == {"owner": "ann"}
    summary = rest.update_namespace_properties("nsa", removals={"owner", "nothing"}, updates={"team": "t1"})
    assert (summary.updated, summary.removed, summary.missing) == (["team"], ["owner"], ["nothing"])
    assert rest.load_namespace_properties("nsa") == {"team": "t1"}
    assert rest.namespace_exists("nsa") and not rest.namespace_exists("nsb")
    with pytest.raises(NoSuchNamespaceError):
        rest.load_namespace_properties("nsb")
    with pytest.raises(NamespaceNotEmptyError):
        rest.drop_namespace("nsa")
    rest.drop_namespace(("nsa", "inner"))
    rest.drop_namespace("nsa")
    assert not rest.namespace_exists("nsa")


def test_list_paging(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("paged")
    for i in range(5):
        rest.create_table(f"paged.t{i}", SCHEMA)
    base = f"{rest_url(server)}/v1/namespaces/paged/tables"
    seen: list[str] = []
    token: str | None = ""
    pages = 0
    while token is not None:
        body = httpx.get(base, params={"pageSize": 2, "pageToken": token}, timeout=10).json()
        seen += [i["name"] for i in body["identifiers"]]
        token = body["next-page-token"]
        pages += 1
    assert seen == [f"t{i}" for i in range(5)] and pages == 3
    paged = RestCatalog("paged", uri=rest_url(server), **{"rest-page-size": "2"})
    assert sorted(paged.list_tables("paged")) == [("paged", f"t{i}") for i in range(5)]
    bad = httpx.get(base, params={"pageSize": 0}, timeout=10)
    assert bad.status_code == 400
    forged = httpx.get(base, params={"pageToken": "not-ours"}, timeout=10)
    assert forged.status_code == 400 and forged.json()["error"]["type"] == "BadRequestException"


def test_appends_and_overwrites_reach_flight_sql_and_the_feed(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("live")
    with FeedReader(server.location, {"feed": "commits.v1", "after": "latest", "tables": ["live.*"]}) as feed:
        feed.wait_for("hello")
        table = rest.create_table("live.t", SCHEMA)
        table.append(rows(0, 3))
        assert sql(server.location, "SELECT count(*) AS n FROM live.t")["n"].to_pylist() == [3]
        table.overwrite(rows(10, 2))
        assert sorted(sql(server.location, "SELECT id FROM live.t")["id"].to_pylist()) == [10, 11]
        table.delete("id = 10")
        events = feed.events(4)
    assert [(e["table"], e["operation"]) for e in events] == [
        ("t", "create"), ("t", "append"), ("t", "overwrite"), ("t", "overwrite")]  # a partial delete rewrites
    assert events[1]["added_rows"] == 3
    assert events[1]["snapshot_id"] == table.metadata.snapshots[0].snapshot_id
    assert sql(server.location, "SELECT id FROM live.t")["id"].to_pylist() == [11]
    record = next(r for r in commit_records(server.warehouse) if r.seq == events[1]["seq"])
    assert record.extra["via"] == "rest" and record.extra["engine"] == "pyiceberg"


def test_flight_sql_writes_are_seen_by_the_rest_client(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("shared")
    rest.create_table("shared.t", SCHEMA).append(rows(0, 2))
    sql(server.location, "INSERT INTO shared.t VALUES (7, 'seven')")
    assert sorted(rest.load_table("shared.t").scan().to_arrow()["id"].to_pylist()) == [0, 1, 7]


def test_schema_evolution_and_partition_specs(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("evo")
    table = rest.create_table("evo.t", SCHEMA)
    table.append(rows(0, 2))
    with table.update_schema() as update:
        update.add_column("score", LongType())
    wider = pa.table({"id": [5], "name": ["five"], "score": [50]},
                     schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.int64())]))
    table.append(wider)
    got = sql(server.location, "SELECT id, score FROM evo.t ORDER BY id")
    assert got.to_pylist() == [{"id": 0, "score": None}, {"id": 1, "score": None}, {"id": 5, "score": 50}]

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "region", StringType()),
                    NestedField(3, "day", DateType()))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"),
                         PartitionField(3, 1001, DayTransform(), "day_day"))
    parted = rest.create_table("evo.parted", schema, partition_spec=spec)
    import datetime

    data = pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"],
                     "day": [datetime.date(2026, 1, 1), datetime.date(2026, 1, 2), datetime.date(2026, 1, 1)]})
    parted.append(data)
    assert len(parted.inspect.partitions()) == 2
    with parted.update_spec() as update_spec:
        update_spec.add_field("id", BucketTransform(4), "id_bucket")
    parted.append(data)
    assert rest.load_table("evo.parted").spec().fields[-1].name == "id_bucket"
    assert sql(server.location, "SELECT count(*) AS n FROM evo.parted WHERE region = 'eu'")["n"].to_pylist() == [4]


def test_time_travel(rest: RestCatalog) -> None:
    rest.create_namespace("tt")
    table = rest.create_table("tt.t", SCHEMA)
    table.append(rows(0, 2))
    first = table.current_snapshot()
    assert first is not None
    table.append(rows(2, 3))
    table = rest.load_table("tt.t")
    assert table.scan().to_arrow().num_rows == 5
    assert table.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 2
    table.manage_snapshots().create_tag(first.snapshot_id, "v1").commit()
    assert rest.load_table("tt.t").refs()["v1"].snapshot_id == first.snapshot_id


def test_concurrent_commits_one_wins_the_other_retries(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("race")
    # No retries inside pyiceberg, so the CommitFailedException (409) reaches the caller.
    rest.create_table("race.t", SCHEMA, properties={"commit.retry.num-retries": "0"})
    stale = RestCatalog("other", uri=rest_url(server)).load_table("race.t")
    rest.load_table("race.t").append(rows(0, 1))  # wins
    with pytest.raises(CommitFailedException):
        stale.append(rows(100, 1))  # its base moved on: the requirement fails
    stale.refresh().append(rows(100, 1))  # retry on the new base succeeds

    failures: list[int] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        catalog = RestCatalog(f"w{n}", uri=rest_url(server))
        for _attempt in range(50):
            try:
                catalog.load_table("race.t").append(rows(1000 + n, 1))
                return
            except CommitFailedException:
                failures.append(n)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                errors.append(exc)
                return
        errors.append(AssertionError(f"writer {n} never committed"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    ids = sorted(sql(server.location, "SELECT id FROM race.t")["id"].to_pylist())
    assert ids == [0, 100, 1000, 1001, 1002, 1003]


def test_staged_create_drop_rename_register(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("life")
    txn = rest.create_table_transaction("life.ctas", SCHEMA)
    txn.append(rows(0, 4))
    assert not rest.table_exists("life.ctas")  # staged: nothing committed yet
    txn.commit_transaction()
    assert sql(server.location, "SELECT count(*) AS n FROM life.ctas")["n"].to_pylist() == [4]
    with pytest.raises(TableAlreadyExistsError):
        rest.create_table("life.ctas", SCHEMA)

    rest.rename_table("life.ctas", "life.renamed")
    assert not rest.table_exists("life.ctas") and rest.table_exists("life.renamed")
    assert sql(server.location, "SELECT count(*) AS n FROM life.renamed")["n"].to_pylist() == [4]
    with pytest.raises(NoSuchTableError):
        rest.rename_table("life.ctas", "life.other")

    location = rest.load_table("life.renamed").metadata_location
    # A folder belongs to one table at a time: registering a live table's metadata under a
    # second name is refused (a purge of either would delete the other's files).
    with pytest.raises(BadRequestError, match="overlaps the folder of table life.renamed"):
        rest.register_table("life.registered", location)
    rest.drop_table("life.renamed")  # files stay
    registered = rest.register_table("life.registered", location)
    assert registered.scan().to_arrow().num_rows == 4
    rest.rename_table("life.registered", "life.renamed")
    assert rest.load_table("life.renamed").scan().to_arrow().num_rows == 4
    data_dir = Path(rest.load_table("life.renamed").location().removeprefix("file://")) / "data"
    assert any(data_dir.iterdir())
    rest.purge_table("life.renamed")
    assert not rest.table_exists("life.renamed")
    assert not any(p.suffix == ".parquet" for p in data_dir.rglob("*"))
    with pytest.raises(NoSuchTableError):
        rest.drop_table("life.renamed")
    ops = [r.operation for r in commit_records(server.warehouse) if r.namespace == ("life",)]
    assert ops == ["create", "rename", "drop", "register", "rename", "drop"]


def test_metrics_reports_are_accepted(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_namespace("metrics")
    rest.create_table("metrics.t", SCHEMA)
    url = f"{rest_url(server)}/v1/namespaces/metrics/tables/t/metrics"
    report = {"report-type": "scan-report", "table-name": "metrics.t", "snapshot-id": 1, "filter": True,
              "schema-id": 0, "projected-field-ids": [1], "projected-field-names": ["id"], "metrics": {}}
    assert httpx.post(url, json=report, timeout=10).status_code == 204
    assert httpx.post(url, content=b"{", headers={"content-type": "application/json"}, timeout=10).status_code == 400


def test_rest_appends_reach_rows_v1_and_change_scans(rest: RestCatalog, server: ServerProcess) -> None:
    import json

    import pyarrow.flight as flight

    rest.create_namespace("rows")
    table = rest.create_table("rows.t", SCHEMA)
    table.append(rows(0, 2))
    table.append(rows(2, 1))
    seqs = [r.seq for r in commit_records(server.warehouse) if r.namespace == ("rows",)]
    with FeedReader(server.location, {"feed": "rows.v1", "after": seqs[0], "until": seqs[2], "tables": ["rows.t"]}
                    ) as feed:
        got: list[dict[str, object]] = []
        while True:
            message = feed.next()
            if message.batch is not None:
                got.extend(message.batch.to_pylist())
            if message.metadata is not None and "end" in message.metadata:
                break
            if message.metadata is not None and "commit" in message.metadata \
                    and message.metadata["commit"]["seq"] == seqs[2]:
                break
    assert [(r["id"], r["_seq"], r["_operation"]) for r in got] == [
        (0, seqs[1], "append"), (1, seqs[1], "append"), (2, seqs[2], "append")]

    client = flight.FlightClient(server.location)
    try:
        descriptor = flight.FlightDescriptor.for_command(
            json.dumps({"changes": "rows.t", "after": seqs[1], "until": seqs[2]}).encode())
        info = client.get_flight_info(descriptor)
        changed = [row for e in info.endpoints for row in client.do_get(e.ticket).read_all().to_pylist()]
    finally:
        client.close()
    assert [(r["id"], r["_seq"]) for r in changed] == [(2, seqs[2])]


def test_strict_schema_policy_refuses_schema_changes(rest: RestCatalog) -> None:
    from pyiceberg.exceptions import BadRequestError

    rest.create_namespace("strict")
    table = rest.create_table("strict.t", SCHEMA, properties={"icefloe.schema-policy": "strict"})
    with pytest.raises(BadRequestError, match="schema policy strict"):
        with table.update_schema() as update:
            update.add_column("extra", LongType())
    assert [f.name for f in rest.load_table("strict.t").schema().fields] == ["id", "name"]
    table.append(rows(0, 1))  # data commits are not schema changes
