"""SQL MERGE INTO over ADBC, copy-on-write and merge-on-read (``write.merge.mode``): the same
rows as a DuckDB native table after every statement (random, seeded sequences), one snapshot
per statement with the files each mode writes, typed parameters, and bad statements refused
with a precise status and nothing committed."""

from __future__ import annotations

import random
from typing import Any

import adbc_driver_manager
import duckdb
import pytest
from sqlwrites_lib import ON_BOTH_STORAGES, log_head, log_records, rows, update

MODES = ["copy-on-write", "merge-on-read"]
STEPS = 14


def _make(conn: Any, ns: str, mode: str, partitioned: bool = False) -> str:
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id BIGINT NOT NULL, p INTEGER, v BIGINT)"
                 + (" PARTITIONED BY (p)" if partitioned else ""))
    update(conn, f"ALTER TABLE {ns}.t SET ('write.merge.mode' = '{mode}')")
    return f"{ns}.t"


def _merge(rng: random.Random, next_id: int) -> tuple[str, int]:
    """A MERGE whose source has unique ids (DuckDB applies every match; the standard refuses)."""
    lo = rng.randint(0, max(next_id, 1))
    n = rng.randint(1, 40)
    step = rng.choice([1, 2, 3])
    source = f"(SELECT i AS id, CAST(i % 3 AS INTEGER) AS p, i * 7 AS v FROM range({lo}, {lo + n * step}, {step}) r(i))"
    matched = rng.choice([
        "WHEN MATCHED AND s.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = t.v + s.v",
        "WHEN MATCHED THEN UPDATE SET v = s.v, p = (t.p + 1) % 3",
        "WHEN MATCHED AND t.v > 500 THEN DELETE",
        "WHEN MATCHED AND t.v % 2 = 1 THEN DO NOTHING WHEN MATCHED THEN DELETE",
        "",
    ])
    not_matched = rng.choice([
        "WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.p, s.v)",
        "WHEN NOT MATCHED AND s.id % 3 = 0 THEN INSERT (id, v) VALUES (s.id, -1)",
        "WHEN NOT MATCHED THEN INSERT *",
        "",
    ])
    if not matched and not not_matched:
        not_matched = "WHEN NOT MATCHED THEN INSERT *"
    text = f"MERGE INTO {{t}} USING {source} s ON t.id = s.id {matched} {not_matched}"
    return text, max(next_id, lo + n * step)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_random_merges_match_duckdb(conn: Any, mode: str, partitioned: bool) -> None:
    ns = f"merge_model_{mode[:5].replace('-', '')}_{'p' if partitioned else 'u'}"
    name = _make(conn, ns, mode, partitioned)
    duck = duckdb.connect()
    duck.execute("CREATE TABLE t (id BIGINT NOT NULL, p INTEGER, v BIGINT)")
    seed_rows = "INSERT INTO {t} SELECT i, CAST(i % 3 AS INTEGER), i * 10 FROM range(0, 120) r(i)"
    update(conn, seed_rows.format(t=name))
    duck.execute(seed_rows.format(t="t"))
    rng = random.Random(38)
    next_id = 120
    for step in range(STEPS):
        text, next_id = _merge(rng, next_id)
        ours = update(conn, text.format(t=name))
        theirs = duck.execute(text.format(t="t")).fetchone()
        assert ours == (theirs[0] if theirs else 0), (step, text)
        want = sorted(duck.execute("SELECT id, p, v FROM t").fetchall())
        got = sorted(tuple(r.values()) for r in rows(conn, f"SELECT id, p, v FROM {name}"))
        assert got == want, (step, text)


@ON_BOTH_STORAGES
@pytest.mark.parametrize("mode", MODES)
def test_one_snapshot_with_the_files_of_the_mode(conn: Any, reader_catalog: Any, mode: str) -> None:
    name = _make(conn, f"merge_files_{mode[:5].replace('-', '')}", mode)
    update(conn, f"INSERT INTO {name} SELECT i, CAST(i % 3 AS INTEGER), i FROM range(0, 100) r(i)")
    update(conn, f"INSERT INTO {name} SELECT i, CAST(i % 3 AS INTEGER), i FROM range(100, 200) r(i)")
    table = reader_catalog.load_table(name)
    before = {f.file.file_path for f in table.scan().plan_files()}
    head = log_head(reader_catalog)
    # 10 rows of the first file deleted, 10 updated, 5 inserted; the second file untouched.
    count = update(conn, f"""MERGE INTO {name} USING (SELECT i AS id FROM range(0, 20) r(i)
                             UNION ALL SELECT i FROM range(1000, 1005) r(i)) s ON t.id = s.id
                             WHEN MATCHED AND t.id < 10 THEN DELETE
                             WHEN MATCHED THEN UPDATE SET v = -t.v
                             WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, 0, 0)""")
    assert count == 25
    records = log_records(reader_catalog, head)
    assert len(records) == 1
    assert (records[0].added_rows, records[0].deleted_rows) == (15, 20)
    table = reader_catalog.load_table(name)
    snap = table.current_snapshot()
    tasks = list(table.scan().plan_files())
    after = {t.file.file_path for t in tasks}
    deletes = [d for t in tasks for d in t.delete_files]
    if mode == "merge-on-read":
        assert before <= after and deletes, "merge-on-read keeps the data files and adds delete files"
        assert snap.summary["added-position-deletes"] == "20"
    else:
        assert not deletes and len(before & after) == 1, "copy-on-write rewrote exactly the first file"
    # pyiceberg (another reader) sees the same rows as icefloe.
    theirs = sorted(table.scan().to_arrow().select(["id", "v"]).to_pylist(), key=lambda r: r["id"])
    ours = rows(conn, f"SELECT id, v FROM {name} ORDER BY id")
    assert theirs == ours and len(ours) == 200 - 10 + 5
    assert [r["v"] for r in ours[:10]] == [-i for i in range(10, 20)]


@pytest.mark.parametrize("mode", MODES)
def test_typed_parameters(conn: Any, mode: str) -> None:
    name = _make(conn, f"merge_params_{mode[:5].replace('-', '')}", mode)
    update(conn, f"INSERT INTO {name} VALUES (1, 1, 10), (2, 2, 20)")
    text = (f"MERGE INTO {name} USING (SELECT ? AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = ? "
            "WHEN NOT MATCHED THEN INSERT VALUES (s.id, ?, ?)")
    assert update(conn, text, (2, 99, 0, 0)) == 1
    assert update(conn, text, (7, 0, 3, 70)) == 1
    assert rows(conn, f"SELECT id, p, v FROM {name} ORDER BY id") == [
        {"id": 1, "p": 1, "v": 10}, {"id": 2, "p": 2, "v": 99}, {"id": 7, "p": 3, "v": 70}]


def test_source_is_another_table_and_the_target_itself(conn: Any) -> None:
    name = _make(conn, "merge_tables", "merge-on-read")
    update(conn, "CREATE TABLE merge_tables.src (id BIGINT, v BIGINT)")
    update(conn, f"INSERT INTO {name} VALUES (1, 0, 1), (2, 0, 2)")
    update(conn, "INSERT INTO merge_tables.src VALUES (2, 200), (3, 300)")
    assert update(conn, f"MERGE INTO {name} AS tgt USING merge_tables.src ON tgt.id = src.id "
                        "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT (id, v) "
                        "VALUES (src.id, src.v)") == 2
    # USING (columns) and the target as its own source: every row doubled in place.
    assert update(conn, f"MERGE INTO {name} USING (SELECT id, v FROM {name}) s USING (id) "
                        "WHEN MATCHED THEN UPDATE SET v = s.v * 2") == 3
    assert rows(conn, f"SELECT id, v FROM {name} ORDER BY id") == [
        {"id": 1, "v": 2}, {"id": 2, "v": 400}, {"id": 3, "v": 600}]


@pytest.mark.parametrize(("statement", "status", "message"), [
    ("MERGE INTO {t} USING (SELECT 1 AS id UNION ALL SELECT 1) s ON t.id = s.id WHEN MATCHED THEN DELETE",
     "INVALID_ARGUMENT", "a target row matched more than one source row"),
    ("MERGE INTO {t} USING (SELECT 5 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (p) VALUES (1)",
     "INVALID_ARGUMENT", "column id is NOT NULL and needs a value in INSERT"),
    ("MERGE INTO {t} USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET nope = 1",
     "NOT_FOUND", "the table has no column nope"),
    ("MERGE INTO {t} USING (SELECT 1 AS id) s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE",
     "NOT_IMPLEMENTED", "WHEN NOT MATCHED BY SOURCE is not supported"),
    ("MERGE INTO {t} USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 'x'",
     "INVALID_ARGUMENT", "MERGE INTO merge_bad.t"),
    ("MERGE INTO {t} USING (SELECT 9 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
     "INVALID_ARGUMENT", "* needs source columns named like the table's; missing p, v"),
    ("MERGE INTO merge_bad.nope USING (SELECT 1 AS id) s ON nope.id = s.id WHEN MATCHED THEN DELETE",
     "NOT_FOUND", "table merge_bad.nope does not exist"),
])
def test_bad_merges_commit_nothing(conn: Any, reader_catalog: Any, statement: str, status: str,
                                   message: str) -> None:
    if not getattr(test_bad_merges_commit_nothing, "made", False):
        _make(conn, "merge_bad", "merge-on-read")
        update(conn, "INSERT INTO merge_bad.t VALUES (1, 1, 1), (2, 2, 2)")
        test_bad_merges_commit_nothing.made = True  # type: ignore[attr-defined]
    head = log_head(reader_catalog)
    with pytest.raises(adbc_driver_manager.Error) as info:
        update(conn, statement.format(t="merge_bad.t"))
    assert status in str(info.value) and message in str(info.value), str(info.value)
    assert log_head(reader_catalog) == head
    assert rows(conn, "SELECT id, p, v FROM merge_bad.t ORDER BY id") == [
        {"id": 1, "p": 1, "v": 1}, {"id": 2, "p": 2, "v": 2}]


def test_merge_into_a_v3_table_is_refused(tmp_path: Any) -> None:
    """icefloe writes no format-v3 commits yet: even an insert-only MERGE into an empty v3
    table is INVALID_ARGUMENT, nothing committed (v3 tables other engines write are read)."""
    import adbc_driver_flightsql.dbapi as fsql
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url

    with rest_server(tmp_path / "wh") as server:
        rest = RestCatalog("icefloe", uri=rest_url(server))
        rest.create_namespace("v3")
        rest.create_table("v3.t", Schema(NestedField(1, "id", LongType(), required=False)),
                          properties={"format-version": "3"})
        seq = head_seq(server.warehouse)
        with fsql.connect(server.location, autocommit=True) as c:
            with pytest.raises(adbc_driver_manager.Error) as info:
                update(c, "MERGE INTO v3.t USING (SELECT 1 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *")
        assert "INVALID_ARGUMENT" in str(info.value)
        assert "MERGE INTO v3.t: the table is Iceberg format v3" in str(info.value)
        assert head_seq(server.warehouse) == seq
