"""``POST /v1/transactions/commit``: several tables land in one write batch or not at all,
also when the server is killed (``kill -9``) while transactions are being sent."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_support import commit_records, head_seq, rest_server, rest_url, sql

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def change(table: Table, ids: list[int]) -> dict[str, Any]:
    """The table-change pyiceberg would send to append ``ids`` to ``table``."""
    txn = table.transaction()
    txn.append(pa.table({"id": ids}, schema=SCHEMA))
    namespace, name = table.name()[:-1], table.name()[-1]
    return {
        "identifier": {"namespace": list(namespace), "name": name},
        "requirements": [json.loads(r.model_dump_json()) for r in txn._requirements],
        "updates": [json.loads(u.model_dump_json()) for u in txn._updates],
    }


def commit(url: str, changes: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{url}/v1/transactions/commit", json={"table-changes": changes}, timeout=60)


def test_two_tables_commit_atomically_and_reach_the_feed(tmp_path: Path) -> None:
    with rest_server(tmp_path / "wh") as server:
        url = rest_url(server)
        rest = RestCatalog("r", uri=url)
        rest.create_namespace("tx")
        a, b = rest.create_table("tx.a", SCHEMA), rest.create_table("tx.b", SCHEMA)
        with FeedReader(server.location, {"feed": "commits.v1", "after": "latest"}) as feed:
            feed.wait_for("hello")
            answer = commit(url, [change(a, [1, 2]), change(b, [3])])
            assert answer.status_code == 204, answer.text
            events = feed.events(2)
        got = [(e["table"], e["operation"], e["added_rows"]) for e in events]
        assert got == [("a", "append", 2), ("b", "append", 1)]
        assert events[1]["seq"] == events[0]["seq"] + 1
        assert sql(server.location, "SELECT count(*) AS n FROM tx.a")["n"].to_pylist() == [2]
        assert sql(server.location, "SELECT count(*) AS n FROM tx.b")["n"].to_pylist() == [1]

        # A failed requirement on one table leaves both unchanged.
        before = head_seq(server.warehouse)
        fresh_a = rest.load_table("tx.a")
        stale_b = change(b, [4])  # b's handle is from before the transaction above
        answer = commit(url, [change(fresh_a, [5]), stale_b])
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["type"] == "CommitFailedException"
        assert head_seq(server.warehouse) == before
        assert sorted(rest.load_table("tx.a").scan().to_arrow()["id"].to_pylist()) == [1, 2]
        assert rest.load_table("tx.b").scan().to_arrow()["id"].to_pylist() == [3]

        # A missing table anywhere refuses the whole transaction with 404.
        missing = {**change(fresh_a, [6]), "identifier": {"namespace": ["tx"], "name": "nope"}}
        answer = commit(url, [change(fresh_a, [6]), missing])
        assert answer.status_code == 404 and answer.json()["error"]["type"] == "NoSuchTableException"
        twice = commit(url, [change(fresh_a, [6]), change(fresh_a, [7])])
        assert twice.status_code == 400 and "more than once" in twice.json()["error"]["message"]
        assert head_seq(server.warehouse) == before


def test_kill_9_while_transactions_run_leaves_whole_transactions_only(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    acked: list[int] = []
    sent: list[int] = []
    with rest_server(warehouse) as server:
        url = rest_url(server)
        rest = RestCatalog("r", uri=url)
        rest.create_namespace("crash")
        rest.create_table("crash.a", SCHEMA)
        rest.create_table("crash.b", SCHEMA)
        stop = threading.Event()

        def send() -> None:
            n = 0
            while not stop.is_set():
                try:
                    a, b = rest.load_table("crash.a"), rest.load_table("crash.b")
                    sent.append(n)
                    if commit(url, [change(a, [n]), change(b, [n])]).status_code == 204:
                        acked.append(n)
                except Exception:  # the server is gone: the last one is unacknowledged
                    return
                n += 1

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 60
        while len(acked) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.13)  # land the kill somewhere inside the next transaction
        server.kill()
        stop.set()
        sender.join(60)
        assert len(acked) >= 5
        server.start()
        a_ids = sorted(sql(server.location, "SELECT id FROM crash.a")["id"].to_pylist())
        b_ids = sorted(sql(server.location, "SELECT id FROM crash.b")["id"].to_pylist())
    assert a_ids == b_ids, "a transaction landed on one table only"
    assert set(acked) <= set(a_ids) <= set(sent), (acked, a_ids, sent)
    assert len(a_ids) == len(set(a_ids)), "a transaction landed twice"
    records = [r for r in commit_records(warehouse) if r.namespace == ("crash",) and r.operation == "append"]
    assert len(records) == 2 * len(a_ids)
