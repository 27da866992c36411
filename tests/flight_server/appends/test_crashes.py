"""All-or-nothing appends when the client or the server dies mid-stream or mid-commit, on a
local warehouse and on S3 (``ON_EVERY_STORAGE``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pyarrow.flight as flight
import pytest
from append_helpers import IDEMPOTENCY_HEADER, data_files_on_disk, do_put, make_table, read_only, rows, scan_ids
from servers import ROOT, ServerProcess
from storage_kinds import ON_EVERY_STORAGE, S3Warehouse, Warehouse, as_listed, start_server

pytestmark = ON_EVERY_STORAGE

CHILD = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa, pyarrow.flight as flight
    location = sys.argv[1]
    client = flight.FlightClient(location)
    table = pa.table({"id": pa.array(range(100_000), pa.int64()), "v": pa.array(["x"] * 100_000, pa.string())})
    writer, _ = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), table.schema)
    for _ in range(5):
        writer.write_table(table, max_chunksize=10_000)
    print("sent", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def table_server(warehouse: Warehouse) -> Iterator[ServerProcess]:
    """Like the shared fixture, but small row groups so files appear early in a stream."""
    make_table(warehouse, properties={"write.parquet.row-group-limit": "10000"})
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


def _head(warehouse: Warehouse) -> int:
    cat = read_only(warehouse)
    try:
        return cat.log.head()
    finally:
        cat.close()


def test_client_killed_mid_stream_commits_nothing(table_server: ServerProcess, warehouse: Warehouse) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, table_server.location],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "sent"
        # The server has received (and started encoding) part of the stream. (On S3 an
        # object exists only once its upload is complete: a file being written is not seen.)
        if not isinstance(warehouse, S3Warehouse):
            deadline = time.monotonic() + 30
            while not data_files_on_disk(warehouse) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert data_files_on_disk(warehouse), "the server never started writing"
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 30
    while data_files_on_disk(warehouse) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert data_files_on_disk(warehouse) == [], "files of the broken stream were left behind"
    assert _head(warehouse) == 1, "a broken-off stream committed"
    assert scan_ids(warehouse) == []
    assert do_put(table_server.location, ("ns", "t"), rows(3))["rows"] == 3


def test_server_killed_mid_stream_then_retry_with_key_commits_once(
    table_server: ServerProcess, warehouse: Warehouse
) -> None:
    data = rows(200_000)
    client = flight.FlightClient(table_server.location)
    options = flight.FlightCallOptions(headers=[(IDEMPOTENCY_HEADER, b"load-42")])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), data.schema, options=options)
    writer.write_table(data.slice(0, 100_000), max_chunksize=10_000)
    deadline = time.monotonic() + 30
    while not isinstance(warehouse, S3Warehouse) and not data_files_on_disk(warehouse) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    table_server.kill()  # SIGKILL while the stream is open and files are half written
    try:
        writer.close()
    except Exception:
        pass  # the server is gone
    client.close()
    assert _head(warehouse) == 1
    table_server.start()
    first = do_put(table_server.location, ("ns", "t"), data, key="load-42", batch_rows=10_000)
    assert first["rows"] == 200_000 and first["duplicate"] is False
    again = do_put(table_server.location, ("ns", "t"), data, key="load-42", batch_rows=10_000)
    assert again == {**first, "duplicate": True}
    assert scan_ids(warehouse) == list(range(200_000))
    # The killed stream's partial files are orphans; maintenance removes them.
    client = flight.FlightClient(table_server.location)
    try:
        results = list(client.do_action(flight.Action("icefloe.maintain", b'{"table": "ns.t", "orphan_grace_s": 0}')))
    finally:
        client.close()
    report = json.loads(results[0].body.to_pybytes())
    # On S3 the killed stream's uploads were never completed, so they never became objects:
    # nothing to remove (the store drops incomplete uploads by its own lifecycle rules).
    assert report["removed_orphans"] >= (0 if isinstance(warehouse, S3Warehouse) else 1)
    assert report["rows"] == 200_000
    cat = read_only(warehouse)
    try:
        table = cat.load_table("ns.t")
        # Every file left is one a snapshot references (the retried append's files stay
        # referenced by its snapshot if maintenance compacted them): none is an orphan.
        referenced = {
            as_listed(task.file.file_path)
            for snap in table.snapshots()
            for task in table.scan(snapshot_id=snap.snapshot_id).plan_files()
        }
    finally:
        cat.close()
    assert {str(p) for p in data_files_on_disk(warehouse)} == referenced
    assert scan_ids(warehouse) == list(range(200_000))


def test_server_killed_mid_commit_keeps_every_acknowledged_write_once(
    table_server: ServerProcess, warehouse: Warehouse
) -> None:
    """Writers append small batches (each with its own idempotency key) until the server is
    killed -9 under them. Afterwards every acknowledged append is there exactly once, every
    other one is there whole or not at all, and a retry of each with its key lands it once."""
    per, writers = 50, 3
    acked: dict[str, int] = {}  # key -> first id
    attempted: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            key, start = f"w{w}-{i}", (w * 100_000 + i) * per
            with lock:
                attempted[key] = start
            try:
                do_put(table_server.location, ("ns", "t"), rows(per, start=start), key=key)
            except Exception:
                return  # the server is gone
            with lock:
                acked[key] = start
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    table_server.kill()  # SIGKILL while writers are mid-stream and mid-commit
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert len(acked) >= 6, "the writers never got going"
    ids = scan_ids(warehouse)
    assert len(ids) == len(set(ids)), "a row is there twice"
    present = set(ids)
    for key, start in attempted.items():
        wanted = set(range(start, start + per))
        if key in acked:
            assert wanted <= present, f"acknowledged append {key} is missing"
        else:
            assert wanted <= present or not (wanted & present), f"append {key} is half visible"
    assert present <= {i for s in attempted.values() for i in range(s, s + per)}, "rows nobody wrote"
    table_server.start()
    for key, start in attempted.items():
        do_put(table_server.location, ("ns", "t"), rows(per, start=start), key=key)
    assert scan_ids(warehouse) == sorted(i for s in attempted.values() for i in range(s, s + per))
