"""Durability on S3: a commit is acknowledged only after every object it references was PUT.

The S3 server (a real one, s3s-fs) is stopped in the middle of a DoPut: the append fails with
UNAVAILABLE within the bounded retries; maintenance and a REST commit fail the same way (503)
while it is down; nothing of any of them is visible after the store is back, and the next
append works.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as fsql
import httpx
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from s3_support import BUCKET, S3Server
from servers import ServerProcess

from tests.flight_server.web.rest_support import rest_url

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def _count(location: str) -> int:
    with fsql.connect(location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n FROM ns.t")
        return int(cur.fetch_arrow_table().column("n")[0].as_py())


def _batch(start: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + rows), pa.int64()),
                            pa.array([f"v{i}" for i in range(rows)])], schema=SCHEMA)


def test_s3_stopped_during_doput(tmp_path: Path) -> None:
    store = S3Server(tmp_path / "s3").start()
    warehouse = f"s3://{BUCKET}/lake"
    proc = ServerProcess(tmp_path / "unused", ["--warehouse", warehouse, "--catalog-path", str(tmp_path / "catalog"),
                                               "--rest-port", "0"], env=store.env()).start()
    try:
        with fsql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA ns")
            cur.execute("CREATE TABLE ns.t (id BIGINT, v VARCHAR)")
        first = do_put(proc.location, ("ns", "t"), pa.table({"id": [0], "v": ["a"]}, schema=SCHEMA))
        keys_before = store.keys("lake")

        client = flight.FlightClient(proc.location)
        try:
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), SCHEMA)
            writer.write_batch(_batch(100, 1000))
            store.stop()  # the object store goes away mid-stream
            started = time.monotonic()
            failure: BaseException | None = None
            try:
                writer.write_batch(_batch(2000, 1000))
                writer.done_writing()
                reader.read()
                writer.close()
            except flight.FlightError as exc:  # at done_writing, read or close: whichever reports it
                failure = exc
            elapsed = time.monotonic() - started
        finally:
            client.close()
        assert isinstance(failure, flight.FlightUnavailableError), (failure, proc.log[-3000:])
        message = str(failure)
        assert "object store failed" in message
        # Nothing a client must not see: no endpoint, bucket or key, no traceback.
        assert store.endpoint not in message and BUCKET not in message and "Traceback" not in message
        assert elapsed < 60, f"bounded retries, but the append took {elapsed:.1f} s to fail"

        # While the store is down, maintenance (compaction, expiry, orphans) fails the same way.
        client = flight.FlightClient(proc.location)
        try:
            body = json.dumps({"table": "ns.t", "orphan_grace_s": 0}).encode()
            with pytest.raises(flight.FlightUnavailableError, match="object store failed"):
                list(client.do_action(flight.Action("icefloe.maintain", body)))
        finally:
            client.close()
        # And a REST commit (a table created over the REST catalog) answers 503, landing nothing.
        rest = rest_url(proc)
        schema = {"type": "struct", "schema-id": 0,
                  "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
        answer = httpx.post(f"{rest}/v1/namespaces/ns/tables", json={"name": "r", "schema": schema}, timeout=120)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "ServiceUnavailableException"
        assert BUCKET not in answer.text and store.endpoint not in answer.text

        store.start()  # same port, same folder
        assert _count(proc.location) == 1, "nothing of the failed append is visible"
        assert httpx.head(f"{rest}/v1/namespaces/ns/tables/r").status_code == 404
        # Not a metadata file, manifest or data file of the failed append landed either.
        new_keys = set(store.keys("lake")) - set(keys_before)
        assert not [k for k in new_keys if "/metadata/" in k], new_keys
        second = do_put(proc.location, ("ns", "t"), pa.table({"id": [1, 2], "v": ["b", "c"]}, schema=SCHEMA))
        assert second["commit_seq"] == first["commit_seq"] + 1, (first, second)
        assert _count(proc.location) == 3
    finally:
        proc.stop()
        store.stop()
    # The feed's durable log holds no event of the failed append either.
    log = json.dumps(proc.log)
    assert "Traceback" not in log, log[-4000:]
