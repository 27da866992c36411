"""Object-store faults during commits: a 500, a slow store, a store stopped mid-commit.

One real S3 server (s3s-fs) sits behind a fault-injecting relay (``s3_faults.FaultRelay``: it
passes every request through unless a rule picks it); one icefloe server for the module talks
to the relay, with a short request timeout so a stalled store fails fast. Each case checks:
the client gets ``UNAVAILABLE`` (503 over REST) with a message naming no bucket, key or
endpoint; nothing of the failed commit is visible; the same write works once the store is back;
and an acknowledged write is there exactly once.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from s3_faults import FaultRelay, Request
from s3_support import BUCKET, S3Server
from servers import ServerProcess

from catalog import RocksCatalog
from catalog.object_store import MAX_ATTEMPTS
from tests.flight_server.web.rest_support import rest_url, sql

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
PREFIX = "faults"
WAREHOUSE = f"s3://{BUCKET}/{PREFIX}"
DATA_PUT = r"/data/[^?]*\.parquet"
METADATA_PUT = r"/metadata/[^?]*\.metadata\.json"
MANIFEST_PUT = r"/metadata/[^?]*\.avro"
REQUEST_TIMEOUT_S = 1
# How long icefloe waits for an object's upload to finish: every attempt its request timeout.
CLOSE_DEADLINE_S = REQUEST_TIMEOUT_S * MAX_ATTEMPTS


@dataclass
class Rig:
    store: S3Server
    relay: FaultRelay
    server: ServerProcess
    catalog_path: Path

    def count(self, table: str) -> int:
        return int(sql(self.server.location, f"SELECT count(*) AS n FROM {table}").column("n")[0].as_py())

    def ids(self, table: str) -> list[int]:
        return sorted(sql(self.server.location, f"SELECT id FROM {table}").column("id").to_pylist())

    def reader(self) -> RocksCatalog:
        """The catalog of record, opened read-only beside the server, reading the store directly."""
        return RocksCatalog("check", warehouse=WAREHOUSE, **{"catalog-path": str(self.catalog_path),
                                                             "read-only": "true", **self.store.io_properties()})

    def keys(self, table: str) -> set[str]:
        return set(self.store.keys(f"{PREFIX}/{table.replace('.', '/')}"))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("s3-faults")
    store = S3Server(root / "s3").start()
    relay = FaultRelay(store.port).start()
    env = {**store.env(), "ICEFLOE_S3_ENDPOINT": relay.endpoint, "ICEFLOE_S3_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_S)}
    server = ServerProcess(root / "unused", ["--warehouse", WAREHOUSE, "--catalog-path", str(root / "catalog"),
                                             "--rest-port", "0"], env=env).start()
    try:
        sql(server.location, "CREATE SCHEMA ns")
        yield Rig(store, relay, server, root / "catalog")
    finally:
        server.stop()
        relay.stop()
        store.stop()
    assert "Traceback" not in server.log, server.log[-4000:]


@pytest.fixture(autouse=True)
def no_rules_left(rig: Rig) -> Iterator[None]:
    yield
    rig.relay.clear()


def _table(rig: Rig, name: str) -> str:
    sql(rig.server.location, f"CREATE TABLE ns.{name} (id BIGINT, v VARCHAR)")
    return f"ns.{name}"


def _rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "v": [f"v{i}" for i in range(count)]}, schema=SCHEMA)


def _assert_unavailable(exc: BaseException, rig: Rig) -> None:
    assert isinstance(exc, flight.FlightUnavailableError), (exc, rig.server.log[-3000:])
    message = str(exc)
    assert re.search(r"the object store (failed a request \([^)]*\)|did not answer in time); nothing was committed",
                     message)
    for secret in (BUCKET, rig.relay.endpoint, rig.store.endpoint, "Traceback"):
        assert secret not in message, message


def _failing_put(rig: Rig, table: str, data: pa.Table) -> BaseException:
    with pytest.raises(flight.FlightError) as failed:
        do_put(rig.server.location, tuple(table.split(".")), data)
    _assert_unavailable(failed.value, rig)
    return failed.value


def test_a_put_answered_500_once_is_retried_and_lands_once(rig: Rig) -> None:
    table = _table(rig, "once")
    rule = rig.relay.fail("PUT", DATA_PUT, status=500, times=1)
    result = do_put(rig.server.location, ("ns", "once"), _rows(0, 100))
    assert rule.hits == 1, "the store answered 500 to the first PUT of the data file"
    assert result["rows"] == 100 and result["duplicate"] is False
    assert rig.ids(table) == list(range(100)), "the acknowledged rows are there exactly once"
    files = sql(rig.server.location, 'SELECT path FROM ns."once$files"').column("path").to_pylist()
    assert len(files) == 1


@pytest.mark.parametrize("pattern", [DATA_PUT, MANIFEST_PUT, METADATA_PUT], ids=["data", "manifest", "metadata"])
def test_a_put_that_keeps_failing_fails_the_doput_and_lands_nothing(rig: Rig, pattern: str) -> None:
    name = "fail_" + pattern.split("*")[-1].strip("\\.").replace("\\.", "_").replace("$", "")
    table = _table(rig, name)
    first = do_put(rig.server.location, ("ns", name), _rows(0, 10))
    with closing(rig.reader()) as before:
        metadata_before = before.load_table(table).metadata_location
    rule = rig.relay.fail("PUT", pattern, status=503)
    _failing_put(rig, table, _rows(10, 10))
    assert rule.hits > 1, "the failing PUT was retried (bounded) before the commit gave up"
    rig.relay.clear()
    with closing(rig.reader()) as after:
        assert after.load_table(table).metadata_location == metadata_before, "the failed commit landed nothing"
    assert rig.ids(table) == list(range(10))
    second = do_put(rig.server.location, ("ns", name), _rows(10, 10))
    assert second["commit_seq"] == first["commit_seq"] + 1, "the failed append took no commit sequence"
    assert rig.ids(table) == list(range(20))


def test_a_slow_store_commits_and_a_stalled_one_fails_within_the_retries(rig: Rig) -> None:
    table = _table(rig, "slow")
    # Slow, but the upload ends within its deadline: the commit lands.
    rig.relay.delay("PUT", DATA_PUT, seconds=REQUEST_TIMEOUT_S)
    assert do_put(rig.server.location, ("ns", "slow"), _rows(0, 5))["rows"] == 5
    rig.relay.clear()
    # Stalled past the deadline (pyarrow's own request timeout does not apply on Linux: before
    # the deadline this append hung until the store answered): UNAVAILABLE, and the data PUT
    # the store finished after icefloe had given up is referenced by nothing.
    stall_s = CLOSE_DEADLINE_S * 2
    rig.relay.delay("PUT", DATA_PUT, seconds=stall_s)
    started = time.monotonic()
    _failing_put(rig, table, _rows(5, 5))
    elapsed = time.monotonic() - started
    rig.relay.clear()
    assert elapsed < stall_s, f"the append waited {elapsed:.0f} s, as long as the stalled store"
    rig.relay.release_held()  # the store answers the abandoned PUT now, after icefloe gave up
    assert rig.ids(table) == list(range(5))
    files = sql(rig.server.location, 'SELECT path FROM ns."slow$files"').column("path").to_pylist()
    assert len(files) == 1


def test_a_rest_commit_fails_503_and_lands_nothing(rig: Rig) -> None:
    table = _table(rig, "rest")
    rest = rest_url(rig.server)
    update = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"owner": "me"}}]}
    rig.relay.fail("PUT", METADATA_PUT, status=500)
    answer = httpx.post(f"{rest}/v1/namespaces/ns/tables/rest", json=update, timeout=120)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "ServiceUnavailableException"
    assert BUCKET not in answer.text and rig.relay.endpoint not in answer.text
    rig.relay.clear()
    loaded = httpx.get(f"{rest}/v1/namespaces/ns/tables/rest", timeout=60).json()
    assert "owner" not in loaded["metadata"]["properties"], "nothing of the failed commit is visible"
    # The store killed (SIGKILL: no clean shutdown) in the middle of the same commit: its
    # metadata PUT is held, then the store goes away under it.
    rig.relay.delay("PUT", METADATA_PUT, seconds=1.0, times=1)
    stopper = threading.Timer(0.3, rig.store.kill)
    stopper.start()
    try:
        answer = httpx.post(f"{rest}/v1/namespaces/ns/tables/rest", json=update, timeout=120)
    finally:
        stopper.join()
        rig.store.start()
    assert answer.status_code == 503, answer.text
    loaded = httpx.get(f"{rest}/v1/namespaces/ns/tables/rest", timeout=60).json()
    assert "owner" not in loaded["metadata"]["properties"]
    answer = httpx.post(f"{rest}/v1/namespaces/ns/tables/rest", json=update, timeout=120)
    assert answer.status_code == 200, answer.text
    assert rig.count(table) == 0


def _maintain(rig: Rig, table: str) -> list[dict[str, object]]:
    client = flight.FlightClient(rig.server.location)
    try:
        body = json.dumps({"table": table, "orphan_grace_s": 3600}).encode()
        return [json.loads(r.body.to_pybytes()) for r in client.do_action(flight.Action("icefloe.maintain", body))]
    finally:
        client.close()


def test_compaction_fails_unavailable_midway_and_lands_nothing(rig: Rig) -> None:
    table = _table(rig, "compact")
    for i in range(4):
        do_put(rig.server.location, ("ns", "compact"), _rows(i * 10, 10))
    with closing(rig.reader()) as before:
        snapshot_before = before.load_table(table).current_snapshot()
    assert snapshot_before is not None
    # The compacted data file is written, then its manifest keeps failing.
    rule = rig.relay.fail("PUT", MANIFEST_PUT, status=500)
    with pytest.raises(flight.FlightError) as failed:
        _maintain(rig, table)
    _assert_unavailable(failed.value, rig)
    assert rule.hits > 1
    rig.relay.clear()
    # The store killed (SIGKILL) while the compacted file is being written.
    rig.relay.delay("PUT", DATA_PUT, seconds=1.0, times=1)
    stopper = threading.Timer(0.3, rig.store.kill)
    stopper.start()
    try:
        with pytest.raises(flight.FlightError) as failed:
            _maintain(rig, table)
    finally:
        stopper.join()
        rig.store.start()
    _assert_unavailable(failed.value, rig)
    with closing(rig.reader()) as after:
        current = after.load_table(table).current_snapshot()
    assert current is not None and current.snapshot_id == snapshot_before.snapshot_id, "nothing landed"
    assert rig.ids(table) == list(range(40))
    report = _maintain(rig, table)[0]
    assert report["compacted_files"] == 4, report
    assert rig.ids(table) == list(range(40)), "compaction keeps every row exactly once"


def test_a_large_file_is_uploaded_in_parts_and_a_failed_completion_lands_nothing(rig: Rig) -> None:
    table = _table(rig, "large")
    # Incompressible values, so the Parquet file is well past one upload part (10 MiB).
    rng = np.random.default_rng(7)
    values = [rng.bytes(12_000).hex() for _ in range(1_000)]
    data = pa.table({"id": pa.array(range(1_000), pa.int64()), "v": values}, schema=SCHEMA)
    rule = rig.relay.fail("POST", r"/data/[^?]*\.parquet\?uploadId=", status=500)
    _failing_put(rig, table, data)
    assert rule.hits > 1, "the multipart upload's completion was retried, then given up"
    rig.relay.clear()
    parts = [r for r in rig.relay.requests("PUT") if "partNumber=" in r.query and "/ns/large/data/" in r.key]
    assert len({r.query.split("partNumber=")[1].split("&")[0] for r in parts}) >= 2, "uploaded in parts"
    assert not [k for k in rig.keys(table) if "/data/" in k], "no uncompleted upload became an object"
    assert rig.count(table) == 0
    result = do_put(rig.server.location, ("ns", "large"), data)
    assert result["rows"] == 1_000
    got = sql(rig.server.location, "SELECT md5(string_agg(v, '' ORDER BY id)) AS h FROM ns.large")
    assert got.column("h").to_pylist() == [hashlib.md5("".join(values).encode()).hexdigest()]


def test_a_commit_is_acknowledged_only_after_every_object_it_references_was_put(rig: Rig) -> None:
    table = _table(rig, "acked")
    # Every PUT is held for a while, so an acknowledgement that ran ahead of one would show.
    rig.relay.delay("PUT", r"/ns/acked/", seconds=0.5)
    rig.relay.delay("POST", r"/ns/acked/.*uploadId=", seconds=0.5)
    do_put(rig.server.location, ("ns", "acked"), _rows(0, 10))
    acknowledged = time.monotonic()
    rig.relay.clear()
    stored = rig.relay.stored()
    with closing(rig.reader()) as cat:
        loaded = cat.load_table(table)
        snapshot = loaded.current_snapshot()
        assert snapshot is not None
        referenced = {loaded.metadata_location, snapshot.manifest_list}
        for manifest in snapshot.manifests(loaded.io):
            referenced.add(manifest.manifest_path)
            referenced.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(loaded.io))
    assert len(referenced) >= 4
    for location in referenced:
        key = location.removeprefix("s3://")
        assert key in stored, f"{key} was never PUT through the store"
        assert stored[key] <= acknowledged, f"{key} was stored after the commit was acknowledged"


def test_the_store_killed_mid_doput_fails_unavailable_and_icefloe_carries_on(rig: Rig) -> None:
    table = _table(rig, "killed")
    do_put(rig.server.location, ("ns", "killed"), _rows(0, 10))
    with closing(rig.reader()) as before:
        metadata_before = before.load_table(table).metadata_location
    # The manifest PUT is held; the store is killed (SIGKILL: no clean shutdown) under it.
    rig.relay.delay("PUT", MANIFEST_PUT, seconds=1.0, times=1)
    assert rig.store.proc is not None
    killer = threading.Timer(0.3, rig.store.kill)
    killer.start()
    try:
        _failing_put(rig, table, _rows(10, 10))
    finally:
        killer.join()
        rig.store.start()
    assert rig.server.proc is not None and rig.server.proc.poll() is None, "icefloe never came down"
    with closing(rig.reader()) as after:
        assert after.load_table(table).metadata_location == metadata_before, "the failed commit landed nothing"
    assert rig.ids(table) == list(range(10))
    for start in (10, 20):
        assert do_put(rig.server.location, ("ns", "killed"), _rows(start, 10))["rows"] == 10
    assert rig.ids(table) == list(range(30)), "every acknowledged write exactly once, nothing else"


def test_a_stalled_first_part_of_a_large_upload_fails_within_its_deadline(rig: Rig) -> None:
    table = _table(rig, "stalled_part")
    rng = np.random.default_rng(11)
    data = pa.table({"id": pa.array(range(1_000), pa.int64()),
                     "v": [rng.bytes(12_000).hex() for _ in range(1_000)]}, schema=SCHEMA)
    stall_s = CLOSE_DEADLINE_S * 3
    # The multipart upload's creation (the first part's request) is never answered in time.
    rig.relay.delay("POST", r"/data/[^?]*\.parquet\?uploads", seconds=stall_s)
    started = time.monotonic()
    _failing_put(rig, table, data)
    elapsed = time.monotonic() - started
    rig.relay.clear()
    assert elapsed < stall_s, f"the append waited {elapsed:.0f} s, as long as the stalled store"
    rig.relay.release_held()  # the stalled store answers at last
    assert rig.count(table) == 0
    assert do_put(rig.server.location, ("ns", "stalled_part"), data)["rows"] == 1_000


def _requests_of(rig: Rig, table: str, run: Callable[[], object]) -> list[Request]:
    start = len(rig.relay.log)
    run()
    folder = f"{BUCKET}/{PREFIX}/{table.replace('.', '/')}/"
    return [r for r in list(rig.relay.log)[start:] if r.key.startswith(folder)]


def test_a_second_scan_of_a_snapshot_reads_only_data(rig: Rig) -> None:
    table = _table(rig, "rescan")
    for i in range(3):
        do_put(rig.server.location, ("ns", "rescan"), _rows(i * 100, 100))
    query = f"SELECT sum(id) AS s FROM {table} WHERE id >= 50"
    first = _requests_of(rig, table, lambda: sql(rig.server.location, query))
    assert [r for r in first if r.key.endswith(".parquet")], "the first scan read the data files"
    again = _requests_of(rig, table, lambda: sql(rig.server.location, query))
    metadata = [r for r in again if "/metadata/" in r.key]
    assert [r for r in metadata if r.method == "GET"] == [], "manifests, lists and metadata come from memory"
    assert len(metadata) <= 1, metadata  # at most the load's existence check of the metadata file
    data = [r for r in again if r.key.endswith(".parquet")]
    assert [r.method for r in data] == ["GET"] * len(data) and len(data) <= 3, \
        "one range read per data file: no HEAD, no second read of a footer"


def test_a_stalled_manifest_read_fails_within_its_deadline(rig: Rig) -> None:
    table = _table(rig, "stalled_read")
    do_put(rig.server.location, ("ns", "stalled_read"), _rows(0, 10))
    # A fresh server on the same store has nothing in memory: it must GET the manifests.
    stall_s = CLOSE_DEADLINE_S * 3
    # After the stalls above (an upload abandoned mid-way), SIGTERM is still a clean stop: the
    # server used to hang in pyarrow's S3 client at interpreter exit until it was SIGKILLed.
    assert rig.server.stop() == 0, rig.server.log[-2000:]
    rig.server.start()
    rig.relay.delay("GET", r"/ns/stalled_read/metadata/[^?]*\.avro", seconds=stall_s)
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        rig.ids(table)
    elapsed = time.monotonic() - started
    rig.relay.clear()
    assert elapsed < stall_s, f"the scan waited {elapsed:.0f} s, as long as the stalled store"
    assert re.search(r"the object store (failed a request|did not answer in time)", str(failed.value)), failed.value
    assert BUCKET not in str(failed.value)
    rig.relay.release_held()  # the stalled store answers at last
    assert rig.ids(table) == list(range(10))


def test_a_stalled_data_read_fails_within_its_deadline(rig: Rig) -> None:
    table = _table(rig, "stalled_data")
    do_put(rig.server.location, ("ns", "stalled_data"), _rows(0, 10))
    stall_s = CLOSE_DEADLINE_S * 3
    assert rig.server.stop() == 0  # nothing of the file in memory: its footer and data must be read
    rig.server.start()
    rig.relay.delay("GET", r"/ns/stalled_data/data/[^?]*\.parquet", seconds=stall_s)
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        rig.ids(table)
    elapsed = time.monotonic() - started
    rig.relay.clear()
    assert elapsed < stall_s, f"the scan waited {elapsed:.0f} s, as long as the stalled store"
    assert re.search(r"the object store (failed a request|did not answer in time)", str(failed.value)), failed.value
    rig.relay.release_held()  # the stalled store answers at last
    assert rig.ids(table) == list(range(10)), "the server carries on once the store answers"
