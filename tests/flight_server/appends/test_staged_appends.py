"""Two-phase appends (x-icefloe-stage DoPut, icefloe.commit-staged / icefloe.abort-staged)
through a real server and pyarrow.flight, as a distributed writer (a Spark job) uses them."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from append_helpers import do_put, make_table, read_only, rows, scan_ids
from servers import ServerProcess
from storage_kinds import ON_EVERY_STORAGE, Warehouse, start_server, table_files

from flight_server.security.users import hash_password

# Staged files and their commit hold on a local folder and on S3 alike.
pytestmark = ON_EVERY_STORAGE

COMMIT = "icefloe.commit-staged"
ABORT = "icefloe.abort-staged"


def stage(location: str, data: pa.Table, job: str = "job-1", table: tuple[str, ...] = ("ns", "t"),
          auth: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    if auth is None:
        return do_put(location, table, data, stage=job)
    client = flight.FlightClient(location)
    try:
        headers = [*auth, (b"x-icefloe-stage", job.encode())]
        writer, reader = client.do_put(
            flight.FlightDescriptor.for_path(*table), data.schema, options=flight.FlightCallOptions(headers=headers)
        )
        writer.write_table(data)
        writer.done_writing()
        buf = reader.read()
        writer.close()
        return dict(json.loads(buf.to_pybytes()))
    finally:
        client.close()


def action(location: str, kind: str, body: Any, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    client = flight.FlightClient(location)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        results = list(client.do_action(flight.Action(kind, raw), flight.FlightCallOptions(headers=headers or [])))
    finally:
        client.close()
    assert len(results) == 1
    return dict(json.loads(results[0].body.to_pybytes()))


def commit(location: str, tokens: list[str], key: str | None = "k1", table: str = "ns.t") -> dict[str, Any]:
    body: dict[str, Any] = {"table": table, "tokens": tokens}
    if key is not None:
        body["idempotency_key"] = key
    return action(location, COMMIT, body)


def head(warehouse: Path) -> int:
    cat = read_only(warehouse)
    try:
        return cat.log.head()
    finally:
        cat.close()


def log_records(warehouse: Path) -> list[Any]:
    cat = read_only(warehouse)
    try:
        return list(cat.log.read(0))
    finally:
        cat.close()


def files_under(warehouse: Warehouse, pattern: str) -> set[str]:
    return set(table_files(warehouse, "ns.t", pattern))


def test_stage_commits_nothing_then_one_commit_lands_every_staging(
    table_server: ServerProcess, warehouse: Path
) -> None:
    before = head(warehouse)
    staged = [stage(table_server.location, rows(100, start=100 * i), job="spark-job") for i in range(3)]
    for answer in staged:
        assert answer["staged"] is True and answer["rows"] == 100 and answer["table"] == "ns.t"
        assert answer["job"] == "spark-job" and answer["files"] >= 1 and answer["bytes"] > 0
        # The token names no server path (DESIGN.md: no answer carries one).
        token = answer["token"]
        assert str(warehouse) not in token and ".parquet" not in token and ".avro" not in token
        assert token.startswith("icefloe.stage.v2:")
    assert head(warehouse) == before, "staging must not commit"
    assert scan_ids(warehouse) == []
    result = commit(table_server.location, [a["token"] for a in staged], key="job-commit")
    assert result["rows"] == 300 and result["duplicate"] is False and result["table"] == "ns.t"
    assert result["commit_seq"] == before + 1
    assert scan_ids(warehouse) == list(range(300))
    record = log_records(warehouse)[-1]
    assert record.seq == result["commit_seq"] and record.operation == "append"
    assert record.added_rows == 300 and record.snapshot_id == result["snapshot_id"]
    assert record.extra["staged"] == {"stagings": 3, "jobs": ["spark-job"]}
    # The staging manifests only carried the files to the commit: gone now.
    assert files_under(warehouse, "staged-*.avro") == set()
    # The commit is a complete Iceberg snapshot: every file the snapshot lists exists.
    cat = read_only(warehouse)
    try:
        snapshot = cat.load_table("ns.t").current_snapshot()
        assert snapshot is not None and snapshot.snapshot_id == result["snapshot_id"]
        assert snapshot.summary is not None and snapshot.summary["added-records"] == "300"
    finally:
        cat.close()


def test_retry_with_the_same_key_answers_the_first_result(table_server: ServerProcess, warehouse: Path) -> None:
    tokens = [stage(table_server.location, rows(10, start=10 * i))["token"] for i in range(2)]
    first = commit(table_server.location, tokens, key="once")
    again = commit(table_server.location, tokens, key="once")
    assert again == {**first, "duplicate": True}
    assert head(warehouse) == first["commit_seq"]
    assert scan_ids(warehouse) == list(range(20))


def test_a_committed_token_under_another_key_or_without_one_is_refused(
    table_server: ServerProcess, warehouse: Path
) -> None:
    token = stage(table_server.location, rows(5))["token"]
    first = commit(table_server.location, [token], key="a")
    for key in ("b", None):
        with pytest.raises(pa.ArrowInvalid, match="committed already") as err:
            commit(table_server.location, [token], key=key)
        assert f"commit seq {first['commit_seq']}" in str(err.value)
    assert scan_ids(warehouse) == list(range(5))
    assert head(warehouse) == first["commit_seq"]


def test_a_token_twice_in_one_commit_is_refused(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(5))["token"]
    before = head(warehouse)
    with pytest.raises(pa.ArrowInvalid, match="appears more than once"):
        commit(table_server.location, [token, token])
    assert head(warehouse) == before
    assert commit(table_server.location, [token])["rows"] == 5  # still committable once


def _tampered(token: str) -> list[str]:
    prefix, mac, body = token.split(":", 2)
    decoded = json.loads(body)
    bigger = json.dumps({**decoded, "rows": decoded["rows"] + 1}, separators=(",", ":"), sort_keys=True)
    forged_mac = base64.urlsafe_b64encode(b"\x00" * 32).decode().rstrip("=")
    return [
        f"{prefix}:{mac}:{bigger}",  # altered body
        f"{prefix}:{forged_mac}:{body}",  # forged signature
        f"icefloe.stmt.v2:{mac}:{body}",  # another purpose
        token[:-3],  # truncated
        body,  # unsigned
        "",
        "\x00" * 64,
    ]


def test_forged_altered_and_foreign_tokens_are_refused(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(5))["token"]
    before = head(warehouse)
    for bad in _tampered(token):
        with pytest.raises(pa.ArrowInvalid) as err:
            commit(table_server.location, [bad])
        assert "staging token" in str(err.value), err.value
    # A token of ns.t given for another table.
    from adbc_driver_flightsql import dbapi

    with dbapi.connect(table_server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE ns.other (id BIGINT, v VARCHAR)")
    before = head(warehouse)
    with pytest.raises(pa.ArrowInvalid, match="another table"):
        commit(table_server.location, [token], table="ns.other")
    assert head(warehouse) == before and scan_ids(warehouse) == []


def test_a_token_of_a_dropped_and_recreated_table_is_refused(table_server: ServerProcess, warehouse: Path) -> None:
    from adbc_driver_flightsql import dbapi

    token = stage(table_server.location, rows(5))["token"]
    with dbapi.connect(table_server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE ns.t")
        cur.execute("CREATE TABLE ns.t (id BIGINT, v VARCHAR)")
    before = head(warehouse)
    with pytest.raises(pa.ArrowInvalid, match="another table"):
        commit(table_server.location, [token])
    assert head(warehouse) == before and scan_ids(warehouse) == []


def test_abort_deletes_the_files_and_the_token_is_dead(table_server: ServerProcess, warehouse: Path) -> None:
    answer = stage(table_server.location, rows(50))
    assert files_under(warehouse, "*.parquet") and files_under(warehouse, "staged-*.avro")
    aborted = action(table_server.location, ABORT, {"table": "ns.t", "tokens": [answer["token"]]})
    assert aborted == {"table": "ns.t", "aborted": 1, "files": answer["files"]}
    assert files_under(warehouse, "*.parquet") == set() and files_under(warehouse, "staged-*.avro") == set()
    again = action(table_server.location, ABORT, {"table": "ns.t", "tokens": [answer["token"]]})
    assert again == {"table": "ns.t", "aborted": 0, "files": 0}
    before = head(warehouse)
    with pytest.raises(KeyError, match="no longer exists"):
        commit(table_server.location, [answer["token"]])
    assert head(warehouse) == before


def test_a_committed_staging_cannot_be_aborted(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(5))["token"]
    commit(table_server.location, [token])
    with pytest.raises(pa.ArrowInvalid, match="committed already"):
        action(table_server.location, ABORT, {"table": "ns.t", "tokens": [token]})
    assert scan_ids(warehouse) == list(range(5))


def test_staging_and_committing_beside_ordinary_appends(table_server: ServerProcess, warehouse: Path) -> None:
    errors: list[BaseException] = []

    def plain(worker: int) -> None:
        try:
            for i in range(10):
                do_put(table_server.location, ("ns", "t"), rows(10, start=100_000 + worker * 1000 + i * 10))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=plain, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    tokens = [stage(table_server.location, rows(100, start=100 * i), job="j")["token"] for i in range(4)]
    result = commit(table_server.location, tokens, key="mixed")
    for t in threads:
        t.join()
    assert not errors, errors
    expected = sorted(list(range(400)) + [100_000 + w * 1000 + i for w in range(3) for i in range(100)])
    assert scan_ids(warehouse) == expected
    staged_commits = [r for r in log_records(warehouse) if "staged" in (r.extra or {})]
    assert [r.seq for r in staged_commits] == [result["commit_seq"]]
    assert staged_commits[0].added_rows == 400


def test_commit_after_an_optional_column_was_added(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(5))["token"]
    wider = pa.table({"id": pa.array([99], pa.int64()), "v": ["x"], "extra": pa.array([1], pa.int32())})
    do_put(table_server.location, ("ns", "t"), wider, schema_policy="evolve")  # adds the column (opt-in)
    result = commit(table_server.location, [token])
    assert result["rows"] == 5
    assert scan_ids(warehouse) == [0, 1, 2, 3, 4, 99]


def test_bad_requests_are_precise_and_commit_nothing(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(5))["token"]
    before = head(warehouse)
    cases: list[tuple[str, Any, str]] = [
        (COMMIT, b"not json", "takes a JSON object"),
        (COMMIT, b"[]", "takes a JSON object"),
        (COMMIT, {"tokens": [token]}, '"table" must be'),
        (COMMIT, {"table": "ns.t"}, '"tokens" must be'),
        (COMMIT, {"table": "ns.t", "tokens": []}, '"tokens" must be'),
        (COMMIT, {"table": "ns.t", "tokens": [1]}, '"tokens" must be'),
        (COMMIT, {"table": "ns.t", "tokens": [token], "idempotency_key": 7}, "must be a string"),
        (COMMIT, {"table": "ns.t", "tokens": [token], "idempotency_key": ""}, "idempotency key"),
        (COMMIT, {"table": "ns.missing", "tokens": [token]}, "another table|does not exist"),
        (COMMIT, {"table": "../etc.t", "tokens": [token]}, "name|another table|does not exist"),
        (ABORT, {"table": "ns.t", "tokens": "x"}, '"tokens" must be'),
    ]
    for kind, body, message in cases:
        with pytest.raises((pa.ArrowInvalid, KeyError), match=message) as err:
            action(table_server.location, kind, body)
        assert "Traceback" not in str(err.value) and str(warehouse) not in str(err.value)
    assert head(warehouse) == before
    # Bad staging headers and inputs.
    # (gRPC itself refuses control characters in header values, so only length reaches us.)
    with pytest.raises(pa.ArrowInvalid, match="job id"):
        stage(table_server.location, rows(1), job="j" * 300)
    with pytest.raises(pa.ArrowInvalid, match="takes no x-icefloe-idempotency-key"):
        client = flight.FlightClient(table_server.location)
        try:
            headers = [(b"x-icefloe-stage", b"j"), (b"x-icefloe-idempotency-key", b"k")]
            writer, reader = client.do_put(
                flight.FlightDescriptor.for_path("ns", "t"), rows(1).schema, flight.FlightCallOptions(headers=headers)
            )
            writer.write_table(rows(1))
            writer.done_writing()
            reader.read()
            writer.close()
        finally:
            client.close()
    with pytest.raises(KeyError, match="does not exist"):
        stage(table_server.location, rows(1), table=("ns", "nope"))
    wider = pa.table({"id": pa.array([1], pa.int64()), "v": ["x"], "new": pa.array([1], pa.int64())})
    with pytest.raises(pa.ArrowInvalid, match="cannot change the table's schema, and this input adds column 'new'") \
            as refused:
        stage(table_server.location, wider)
    assert "ALTER TABLE ns.t" in str(refused.value) and "without staging" not in str(refused.value)
    assert head(warehouse) == before
    assert commit(table_server.location, [token])["rows"] == 5  # the server is fine, the token too


def test_kill_between_stage_and_commit(table_server: ServerProcess, warehouse: Path) -> None:
    keep = stage(table_server.location, rows(10), job="survivor")["token"]
    lost = stage(table_server.location, rows(10, start=10), job="abandoned")
    table_server.kill()
    table_server.start()
    assert scan_ids(warehouse) == []  # nothing staged is visible after the crash
    # A staging is durable: its token still commits after the restart.
    assert commit(table_server.location, [keep], key="after-crash")["rows"] == 10
    # The abandoned one is removed by orphan removal once past the grace period ...
    lost_files = files_under(warehouse, "*.parquet") - _live_files(warehouse)
    assert lost_files
    report = action(table_server.location, "icefloe.maintain", {"table": "ns.t", "orphan_grace_s": 0})
    assert report["removed_orphans"] >= len(lost_files)
    assert not (lost_files & files_under(warehouse, "*.parquet"))
    assert files_under(warehouse, "staged-*.avro") == set()
    # ... and its token is dead.
    with pytest.raises(KeyError, match="no longer exists"):
        commit(table_server.location, [lost["token"]], key="too-late")
    assert scan_ids(warehouse) == list(range(10))


def test_young_stagings_survive_orphan_removal(table_server: ServerProcess, warehouse: Path) -> None:
    token = stage(table_server.location, rows(10))["token"]
    report = action(table_server.location, "icefloe.maintain", {"table": "ns.t", "orphan_grace_s": 3600})
    assert report["removed_orphans"] == 0
    assert commit(table_server.location, [token])["rows"] == 10


def _live_files(warehouse: Path) -> set[str]:
    cat = read_only(warehouse)
    try:
        return {f.file.file_path.removeprefix("file://") for f in cat.load_table("ns.t").scan().plan_files()}
    finally:
        cat.close()


def test_only_the_stager_or_an_admin_commits(warehouse: Path, tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    people = {"wanda": ("write", "wanda-pw-4c1e9a"), "walt": ("write", "walt-pw-77d2f0"), "ada": ("admin", "ada-pw-a9")}
    users.write_text("".join(
        f'[users.{n}]\nrole = "{r}"\npassword_hash = "{hash_password(p)}"\n\n' for n, (r, p) in people.items()
    ))
    make_table(warehouse)
    server = start_server(warehouse, ["--users", str(users)]).start()
    try:
        def login(name: str) -> list[tuple[bytes, bytes]]:
            client = flight.FlightClient(server.location)
            try:
                return [client.authenticate_basic_token(name, people[name][1])]
            finally:
                client.close()

        wanda, walt, ada = login("wanda"), login("walt"), login("ada")
        first = stage(server.location, rows(5), auth=wanda)
        second = stage(server.location, rows(5, start=5), auth=wanda)
        body = {"table": "ns.t", "tokens": [first["token"]], "idempotency_key": "w"}
        with pytest.raises(flight.FlightUnauthorizedError, match="who staged it|user who staged"):
            action(server.location, COMMIT, body, headers=walt)
        assert action(server.location, COMMIT, body, headers=wanda)["rows"] == 5
        body = {"table": "ns.t", "tokens": [second["token"]], "idempotency_key": "a"}
        assert action(server.location, COMMIT, body, headers=ada)["rows"] == 5
        record = log_records(warehouse)[-1]
        assert record.principal == "ada"
    finally:
        server.stop()
