"""DoPut appends against a real server with real pyarrow.flight clients."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from append_helpers import IDEMPOTENCY_HEADER, data_files_on_disk, do_put, read_only, rows, scan_ids
from servers import ServerProcess
from storage_kinds import ON_EVERY_STORAGE

# Appends hold on a local folder and on S3 alike.
pytestmark = ON_EVERY_STORAGE


def test_doput_appends_and_answers_exact_json(table_server: ServerProcess, warehouse: Path) -> None:
    first = do_put(table_server.location, ("ns", "t"), rows(1000), batch_rows=128)
    assert list(first) == ["table", "commit_seq", "snapshot_id", "rows", "duplicate"]
    assert first["table"] == "ns.t" and first["rows"] == 1000 and first["duplicate"] is False
    second = do_put(table_server.location, ("ns", "t"), rows(10, start=1000))
    assert second["commit_seq"] > first["commit_seq"]
    assert scan_ids(warehouse) == list(range(1010))
    cat = read_only(warehouse)
    try:
        record = cat.log.get(second["commit_seq"])
        assert record is not None and record.operation == "append" and record.added_rows == 10
        assert record.snapshot_id == second["snapshot_id"]
        assert cat.load_table("ns.t").current_snapshot().snapshot_id == second["snapshot_id"]  # type: ignore[union-attr]
    finally:
        cat.close()


def test_empty_stream_commits_nothing(table_server: ServerProcess, warehouse: Path) -> None:
    result = do_put(table_server.location, ("ns", "t"), rows(0))
    assert result["rows"] == 0
    cat = read_only(warehouse)
    try:
        assert cat.log.head() == 1  # only the create
    finally:
        cat.close()


def test_idempotent_retry_returns_first_result(table_server: ServerProcess, warehouse: Path) -> None:
    first = do_put(table_server.location, ("ns", "t"), rows(100), key="batch-0001")
    again = do_put(table_server.location, ("ns", "t"), rows(100), key="batch-0001")
    assert again == {**first, "duplicate": True}
    other = do_put(table_server.location, ("ns", "t"), rows(5, start=100), key="batch-0002")
    assert other["duplicate"] is False and other["commit_seq"] > first["commit_seq"]
    assert scan_ids(warehouse) == list(range(105))
    # The replayed stream's files were not kept.
    assert len(data_files_on_disk(warehouse)) == 2


def test_idempotency_key_survives_restart(table_server: ServerProcess, warehouse: Path) -> None:
    first = do_put(table_server.location, ("ns", "t"), rows(50), key="k-restart")
    table_server.kill()
    table_server.start()
    again = do_put(table_server.location, ("ns", "t"), rows(50), key="k-restart")
    assert again == {**first, "duplicate": True}
    assert scan_ids(warehouse) == list(range(50))


def _expect(code: type[Exception], fn: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(code) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    message = str(info.value)
    assert "Traceback" not in message and "/work" not in message and ".py" not in message, message
    return message


def test_bad_inputs_answered_precisely(table_server: ServerProcess, warehouse: Path) -> None:
    loc = table_server.location
    msg = _expect(pa.ArrowKeyError, do_put, loc, ("ns", "missing"), rows(3))
    assert "NOT_FOUND" in msg and "ns.missing" in msg
    msg = _expect(pa.ArrowKeyError, do_put, loc, ("nope", "t"), rows(3))
    assert "NOT_FOUND" in msg
    msg = _expect(pa.ArrowInvalid, do_put, loc, ("t",), rows(3))
    assert "INVALID_ARGUMENT" in msg and "namespace" in msg
    msg = _expect(pa.ArrowInvalid, do_put, loc, ("ns", ""), rows(3))
    assert "INVALID_ARGUMENT" in msg
    clash = pa.table({"id": ["not", "a", "number"], "v": ["a", "b", "c"]})
    msg = _expect(pa.ArrowInvalid, do_put, loc, ("ns", "t"), clash)
    assert "INVALID_ARGUMENT" in msg and "'id'" in msg
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"])
    msg = _expect(pa.ArrowInvalid, do_put, loc, ("ns", "t"), dup)
    assert "'id'" in msg and "more than once" in msg
    msg = _expect(pa.ArrowInvalid, do_put, loc, ("ns", "t"), rows(3), key="x" * 300)
    assert "idempotency key" in msg
    # A command descriptor is Flight SQL's business, not an append.
    client = flight.FlightClient(loc)
    try:
        with pytest.raises((flight.FlightError, pa.ArrowException)):
            w, r = client.do_put(flight.FlightDescriptor.for_command(b"garbage"), rows(1).schema)
            w.write_table(rows(1))
            w.done_writing()
            r.read()
            w.close()
    finally:
        client.close()
    cat = read_only(warehouse)
    try:
        assert cat.log.head() == 1, "a refused append committed something"
    finally:
        cat.close()
    assert data_files_on_disk(warehouse) == []
    # The server still works.
    assert do_put(loc, ("ns", "t"), rows(2))["rows"] == 2


def test_eight_concurrent_writers_lose_nothing(table_server: ServerProcess, warehouse: Path) -> None:
    per_writer, appends = 50, 20
    results: list[dict[str, object]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            for i in range(appends):
                start = (w * appends + i) * per_writer
                r = do_put(table_server.location, ("ns", "t"), rows(per_writer, start=start))
                with lock:
                    results.append(r)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    assert len(results) == 8 * appends
    assert all(r["rows"] == per_writer for r in results)
    assert scan_ids(warehouse) == list(range(8 * appends * per_writer))
    seqs = {r["commit_seq"] for r in results}
    cat = read_only(warehouse)
    try:
        records = [cat.log.get(int(s)) for s in seqs]  # type: ignore[call-overload]
        assert sum(r.added_rows or 0 for r in records if r is not None) == 8 * appends * per_writer
    finally:
        cat.close()


def test_result_only_after_durable_commit_and_log_matches(table_server: ServerProcess, warehouse: Path) -> None:
    result = do_put(table_server.location, ("ns", "t"), rows(7))
    # SIGKILL right after the answer: the commit must already be on disk.
    table_server.kill()
    cat = read_only(warehouse)
    try:
        assert cat.log.head() == result["commit_seq"]
        assert cat.load_table("ns.t").scan().to_arrow().num_rows == 7
    finally:
        cat.close()
    table_server.start()


def test_put_result_is_json_object(table_server: ServerProcess) -> None:
    client = flight.FlightClient(table_server.location)
    try:
        writer, reader = client.do_put(
            flight.FlightDescriptor.for_path("ns", "t"),
            rows(1).schema,
            options=flight.FlightCallOptions(headers=[(IDEMPOTENCY_HEADER, b"one")]),
        )
        writer.write_table(rows(1))
        writer.done_writing()
        body = json.loads(reader.read().to_pybytes())
        writer.close()
    finally:
        client.close()
    assert set(body) == {"table", "commit_seq", "snapshot_id", "rows", "duplicate"}
    assert isinstance(body["commit_seq"], int) and isinstance(body["snapshot_id"], int)
