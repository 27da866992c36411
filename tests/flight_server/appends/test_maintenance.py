"""Background compaction in a running server, the maintain DoAction and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from append_helpers import do_put, make_table, read_only, rows
from s3_support import BUCKET
from servers import ROOT, ServerProcess
from storage_kinds import ON_EVERY_STORAGE, S3Warehouse, Warehouse, as_listed, start_server, table_files


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flight_server.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_background_compaction_while_writers_and_readers_run(table_server: ServerProcess, warehouse: Path) -> None:
    writers, appends, per = 4, 30, 20
    problems: list[str] = []
    done = threading.Event()
    acked: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            for i in range(appends):
                do_put(table_server.location, ("ns", "t"), rows(per, start=(w * appends + i) * per))
                with lock:
                    acked.append(per)
        except Exception as exc:
            problems.append(repr(exc))

    def reader() -> None:
        cat = read_only(warehouse)
        try:
            while not done.is_set():
                with lock:
                    floor = sum(acked)
                ids = cat.load_table("ns.t").scan().to_arrow().column("id").to_pylist()
                if len(ids) != len(set(ids)):
                    problems.append("duplicated rows in a scan")
                if len(ids) < floor:
                    problems.append(f"lost rows in a scan: {len(ids)} < {floor}")
                time.sleep(0.05)
        finally:
            cat.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    watcher = threading.Thread(target=reader)
    for t in [*threads, watcher]:
        t.start()
    for t in threads:
        t.join(timeout=240)
    # give the background maintainer (1 s period) a chance to catch the last files
    deadline = time.monotonic() + 20
    cat = read_only(warehouse)
    try:
        while time.monotonic() < deadline:
            if any(r.operation == "replace" for r in cat.log.read(0)):
                break
            time.sleep(0.2)
        ops = [r.operation for r in cat.log.read(0)]
    finally:
        cat.close()
    done.set()
    watcher.join(timeout=60)
    assert not problems, problems[:3]
    assert "replace" in ops, "the background maintainer never compacted"
    cat = read_only(warehouse)
    try:
        table = cat.load_table("ns.t")
        ids = sorted(table.scan().to_arrow().column("id").to_pylist())
        live = len(list(table.scan().plan_files()))
    finally:
        cat.close()
    assert ids == list(range(writers * appends * per))
    assert live < writers * appends


def test_maintain_action_and_errors(table_server: ServerProcess, warehouse: Path) -> None:
    for i in range(5):
        do_put(table_server.location, ("ns", "t"), rows(10, start=i * 10))
    client = flight.FlightClient(table_server.location)
    try:
        assert "icefloe.maintain" in {a.type for a in client.list_actions()}
        out = [json.loads(r.body.to_pybytes()) for r in client.do_action(flight.Action("icefloe.maintain", b"{}"))]
        assert out[0]["table"] == "ns.t" and out[0]["compacted_files"] == 5 and out[0]["rows"] == 50
        with pytest.raises(pa.ArrowKeyError, match="ns.nope does not exist"):  # NOT_FOUND
            list(client.do_action(flight.Action("icefloe.maintain", b'{"table": "ns.nope"}')))
        with pytest.raises(pa.ArrowInvalid, match="JSON object"):  # INVALID_ARGUMENT
            list(client.do_action(flight.Action("icefloe.maintain", b"[1")))
    finally:
        client.close()
    result = _cli("maintain", "ns.t", "--uri", table_server.location)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["table"] == "ns.t"
    # offline mode refuses politely while the server holds the warehouse
    held = _cli("maintain", "--warehouse", str(warehouse))
    assert held.returncode != 0 and "--uri" in held.stderr and "Traceback" not in held.stderr


def test_maintain_offline(warehouse: Path) -> None:
    make_table(warehouse)
    proc = ServerProcess(warehouse).start()
    try:
        for i in range(4):
            do_put(proc.location, ("ns", "t"), rows(5, start=i * 5))
    finally:
        proc.stop()
    result = _cli("maintain", "ns.t", "--warehouse", str(warehouse), "--orphan-grace-s", "0")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["compacted_files"] == 4 and report["rows"] == 20
    missing = _cli("maintain", "ns.nope", "--warehouse", str(warehouse))
    assert missing.returncode != 0 and "does not exist" in missing.stderr


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_compaction_worker_process_goes_with_a_killed_server(table_server: ServerProcess, warehouse: Path) -> None:
    for i in range(20):
        do_put(table_server.location, ("ns", "t"), rows(5, start=i * 5))
    assert table_server.proc is not None
    server_pid = table_server.proc.pid
    deadline = time.monotonic() + 30
    cat = read_only(warehouse)
    try:
        while not any(r.operation == "replace" for r in cat.log.read(0)):
            assert time.monotonic() < deadline, "the background maintainer never compacted"
            time.sleep(0.2)
    finally:
        cat.close()
    workers = _children(server_pid)
    assert workers, "compaction ran without a worker process"
    table_server.kill()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if _alive(p)], "the worker outlived the SIGKILLed server"


def test_maintain_action_when_the_worker_is_gone_is_unavailable(tmp_path: Path) -> None:
    from flight_server.config import Config
    from flight_server.server import IcefloeServer

    server = IcefloeServer(Config(warehouse=str(tmp_path / "wh"), port=0))
    try:
        server.catalog.create_namespace("ns")
        server.catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))
        for i in range(3):
            server.catalog.load_table("ns.t").append(pa.table({"id": pa.array([i], pa.int64())}))
        head = server.catalog.log.head()
        server.appends.maintainer.worker.close()  # as at shutdown
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        with pytest.raises(flight.FlightUnavailableError, match="maintenance did not finish"):
            list(client.do_action(flight.Action("icefloe.maintain", b'{"table": "ns.t"}')))
        assert server.catalog.log.head() == head  # nothing committed
        client.close()
    finally:
        server.shutdown_and_close(grace_s=10.0)


def _put_stray(warehouse: Warehouse, relative: str) -> str:
    """A file no snapshot references, at ``relative`` under the warehouse; its location."""
    if isinstance(warehouse, S3Warehouse):
        key = f"{BUCKET}/{warehouse.prefix}/{relative}"
        with warehouse.store.filesystem().open_output_stream(key) as out:
            out.write(b"stray")
        return f"s3://{key}"
    path = warehouse / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"stray")
    return str(path)


def _exists(warehouse: Warehouse, location: str) -> bool:
    if isinstance(warehouse, S3Warehouse):
        return location.removeprefix(f"s3://{BUCKET}/") in warehouse.store.keys(warehouse.prefix)
    return Path(location).exists()


@ON_EVERY_STORAGE
def test_compaction_expiry_and_orphan_removal_by_listing(warehouse: Warehouse) -> None:
    """One maintenance pass on each storage: the small files are compacted, old snapshots
    expired (retention 0), a stray file in the table's folder removed (found by listing the
    table's prefix), a stray outside it left alone, and every row kept exactly once."""
    make_table(warehouse, properties={"history.expire.max-snapshot-age-ms": "0",
                                      "history.expire.min-snapshots-to-keep": "1"})
    proc = start_server(warehouse).start()
    try:
        for i in range(4):
            do_put(proc.location, ("ns", "t"), rows(5, start=i * 5))
        stray = _put_stray(warehouse, "ns/t/data/stray-0001.parquet")
        outside = _put_stray(warehouse, "ns/t2/data/stray-0002.parquet")
        client = flight.FlightClient(proc.location)
        try:
            body = json.dumps({"table": "ns.t", "orphan_grace_s": 0}).encode()
            report = json.loads(next(iter(client.do_action(flight.Action("icefloe.maintain", body)))).body.to_pybytes())
        finally:
            client.close()
        assert report["compacted_files"] == 4 and report["rows"] == 20, report
        assert report["removed_orphans"] >= 1 and report["expired_snapshots"] >= 1, report
        assert not _exists(warehouse, stray), "the orphan was removed"
        assert _exists(warehouse, outside), "a file outside the table's prefix is not the table's to remove"
        cat = read_only(warehouse)
        try:
            table = cat.load_table("ns.t")
            live = {as_listed(task.file.file_path) for task in table.scan().plan_files()}
        finally:
            cat.close()
        assert len(live) == 1
        data = {f for f in table_files(warehouse, "ns.t", "*.parquet") if "/data/" in f}
        assert data == live, "only the compacted file is left in the table's data folder"
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(20))
    finally:
        proc.stop()
    assert "Traceback" not in proc.log, proc.log[-3000:]
