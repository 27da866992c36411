"""``icefloe.commit-staged`` with ``"mode": "overwrite"``: staged files replace the table's rows
in one Iceberg overwrite snapshot and one catalog commit, through a real server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from append_helpers import do_put, read_only, rows, scan_ids
from lineage_collector import Collector
from servers import ServerProcess
from test_staged_appends import COMMIT, action, head, log_records, stage


def overwrite(location: str, tokens: list[str], key: str | None = "ow-1") -> dict[str, Any]:
    body: dict[str, Any] = {"table": "ns.t", "tokens": tokens, "mode": "overwrite"}
    if key is not None:
        body["idempotency_key"] = key
    return action(location, COMMIT, body)


def test_overwrite_is_one_snapshot_one_commit_and_idempotent(table_server: ServerProcess, warehouse: Path) -> None:
    do_put(table_server.location, ("ns", "t"), rows(50))
    do_put(table_server.location, ("ns", "t"), rows(50, start=50))
    before = head(warehouse)
    tokens = [stage(table_server.location, rows(10, start=1000 + 10 * i), job="spark-ow")["token"] for i in range(2)]
    assert head(warehouse) == before and scan_ids(warehouse) == list(range(100))
    result = overwrite(table_server.location, tokens)
    assert result["commit_seq"] == before + 1, "one catalog commit"
    assert result["rows"] == 20 and result["duplicate"] is False and result["mode"] == "overwrite"
    assert scan_ids(warehouse) == list(range(1000, 1020))
    record = log_records(warehouse)[-1]
    assert record.seq == result["commit_seq"] and record.operation == "overwrite"
    assert record.added_rows == 20 and record.deleted_rows == 100 and record.snapshot_id == result["snapshot_id"]
    assert record.extra["staged"] == {"stagings": 2, "jobs": ["spark-ow"], "mode": "overwrite"}
    cat = read_only(warehouse)
    try:
        table = cat.load_table("ns.t")
        snapshot = table.current_snapshot()
        assert snapshot is not None and snapshot.snapshot_id == result["snapshot_id"]
        assert snapshot.summary is not None and snapshot.summary.operation.value == "overwrite"
        assert snapshot.summary["deleted-records"] == "100" and snapshot.summary["added-records"] == "20"
        parent = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id or -1)
        assert parent is not None and parent.sequence_number is not None  # the append before it: one step
    finally:
        cat.close()
    # A retry with the key (a driver that lost the answer) is the first result, nothing new.
    again = overwrite(table_server.location, tokens)
    assert again == {**result, "duplicate": True}
    assert head(warehouse) == result["commit_seq"] and scan_ids(warehouse) == list(range(1000, 1020))


def test_overwrite_with_no_tokens_empties_the_table_in_one_commit(table_server: ServerProcess, warehouse: Path) -> None:
    do_put(table_server.location, ("ns", "t"), rows(30))
    before = head(warehouse)
    result = overwrite(table_server.location, [], key="empty-it")
    assert result["rows"] == 0 and result["commit_seq"] == before + 1
    assert scan_ids(warehouse) == []
    assert log_records(warehouse)[-1].operation == "overwrite"
    # Plain append mode still needs tokens; an unknown mode is refused; neither commits.
    with pytest.raises(pa.ArrowInvalid, match='"tokens" must be a non-empty list'):
        action(table_server.location, COMMIT, {"table": "ns.t", "tokens": []})
    token = stage(table_server.location, rows(3))["token"]
    for mode in ("replace", 1, None):
        with pytest.raises(pa.ArrowInvalid, match='"mode" must be one of append, overwrite') as err:
            action(table_server.location, COMMIT, {"table": "ns.t", "tokens": [token], "mode": mode})
        assert "Traceback" not in str(err.value)
    assert head(warehouse) == before + 1
    assert overwrite(table_server.location, [token], key="after")["rows"] == 3
    assert scan_ids(warehouse) == [0, 1, 2]


def test_concurrent_reader_never_sees_an_empty_or_doubled_table(table_server: ServerProcess, warehouse: Path) -> None:
    """Overwrites race appends of other writers and a reader; every read is one whole generation."""
    do_put(table_server.location, ("ns", "t"), rows(40))
    stop = threading.Event()
    seen: list[int] = []
    failures: list[BaseException] = []

    def read() -> None:
        cat = read_only(warehouse)
        try:
            while not stop.is_set():
                ids = cat.load_table("ns.t").scan().to_arrow().column("id").to_pylist()
                seen.append(len(ids))
                generations = sorted({i // 1000 for i in ids})
                if len(ids) != 40 or len(generations) != 1:
                    failures.append(AssertionError(f"a reader saw {len(ids)} rows of generations {generations}"))
        except BaseException as exc:  # noqa: BLE001  # reported by the main thread
            failures.append(exc)
        finally:
            cat.close()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for generation in range(1, 9):
            parts = [rows(20, start=1000 * generation + 20 * i) for i in range(2)]
            tokens = [stage(table_server.location, part)["token"] for part in parts]
            overwrite(table_server.location, tokens, key=f"gen-{generation}")
    finally:
        stop.set()
        reader.join(60)
    assert not failures, failures[:3]
    assert len(seen) >= 8, "the reader must have raced the overwrites"
    assert scan_ids(warehouse) == list(range(8000, 8040))
    operations = [r.operation for r in log_records(warehouse)]
    assert operations[-8:] == ["overwrite"] * 8


def test_one_lineage_run_per_overwrite(warehouse: Path) -> None:
    from append_helpers import make_table

    make_table(warehouse)
    collector = Collector().up()
    proc = ServerProcess(warehouse, env={"OPENLINEAGE_URL": collector.url}).start()
    try:
        token = stage(proc.location, rows(5))["token"]
        overwrite(proc.location, [token], key="lineage-ow")
        events = collector.wait_for(lambda evs: any(e["eventType"] == "COMPLETE" for e in evs))
        runs = {e["run"]["runId"] for e in events}
        assert len(runs) == 1
        complete = [e for e in events if e["eventType"] == "COMPLETE"]
        assert len(complete) == 1 and complete[0]["outputs"][0]["name"].endswith("ns.t")
    finally:
        proc.stop()
        collector.down()
