"""Random append / DELETE / UPDATE sequences on a merge-on-read icefloe table and on a native
DuckDB table give the same rows after every statement and at every snapshot (time travel),
unpartitioned and partitioned (seeded: a failure names its seed and statement)."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pytest
from sqlwrites_lib import rows, update

MOR = "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read'"
STEPS = 24


def _statement(rng: random.Random, next_id: int) -> tuple[str, int]:
    kind = rng.choice(["insert", "insert", "delete", "delete", "update", "update"])
    if kind == "insert":
        n = rng.randint(1, 60)
        return (f"INSERT INTO {{t}} SELECT i, CAST(i % 4 AS INTEGER), i * 10 FROM range({next_id}, {next_id + n}) r(i)",
                next_id + n)
    cond = rng.choice([
        f"id % {rng.randint(2, 9)} = {rng.randint(0, 1)}",
        f"id BETWEEN {rng.randint(0, next_id)} AND {rng.randint(0, next_id)}",
        f"p = {rng.randint(0, 3)} AND v > {rng.randint(0, next_id * 10)}",
        f"v % 7 = {rng.randint(0, 6)}",
    ])
    if kind == "delete":
        return f"DELETE FROM {{t}} WHERE {cond}", next_id
    return rng.choice([f"UPDATE {{t}} SET v = v + 1 WHERE {cond}",
                       f"UPDATE {{t}} SET v = v * 3, p = (p + 1) % 4 WHERE {cond}"]), next_id


@pytest.mark.parametrize("seed", [7, 38])
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_random_sequences_match_duckdb(conn: Any, reader_catalog: Any, seed: int, partitioned: bool) -> None:
    ns = f"mor_model_{seed}_{'p' if partitioned else 'u'}"
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id BIGINT NOT NULL, p INTEGER, v BIGINT)"
                 + (" PARTITIONED BY (p)" if partitioned else ""))
    update(conn, f"ALTER TABLE {ns}.t SET ({MOR})")
    duck = duckdb.connect()
    duck.execute("CREATE TABLE t (id BIGINT NOT NULL, p INTEGER, v BIGINT)")
    rng = random.Random(seed)
    next_id = 0
    states: dict[int, list[tuple[Any, ...]]] = {}
    for step in range(STEPS):
        text, next_id = _statement(rng, next_id)
        ours = update(conn, text.format(t=f"{ns}.t"))
        theirs = duck.execute(text.format(t="t")).fetchone()
        assert ours == (theirs[0] if theirs else 0), (seed, step, text)
        want = sorted(duck.execute("SELECT id, p, v FROM t").fetchall())
        got = sorted(tuple(r.values()) for r in rows(conn, f"SELECT id, p, v FROM {ns}.t"))
        assert got == want, (seed, step, text)
        snapshot = reader_catalog.load_table(f"{ns}.t").current_snapshot()
        if snapshot is not None:
            states[snapshot.snapshot_id] = want
    # Every snapshot still reads as the table read right after its statement (icefloe and pyiceberg).
    table = reader_catalog.load_table(f"{ns}.t")
    for snapshot_id, want in states.items():
        at = f"SELECT id, p, v FROM {ns}.t AT (VERSION => {snapshot_id})"
        got = sorted(tuple(r.values()) for r in rows(conn, at))
        assert got == want, (seed, snapshot_id)
        scanned = table.scan(snapshot_id=snapshot_id).to_arrow().select(["id", "p", "v"]).to_pylist()
        assert sorted(tuple(r.values()) for r in scanned) == want, (seed, snapshot_id)
