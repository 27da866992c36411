"""The query log: one line per statement, literals redacted, never a secret; JSON or text;
slow statements at WARNING."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pytest
from adbc_driver_flightsql import DatabaseOptions

from flight_server.observability.metrics import Metrics
from flight_server.observability.querylog import QueryLog, normalise
from tests.flight_server.security.security_support import PASSWORDS, write_users_file
from tests.servers import serving

# Literals that must never reach the log, each odd enough not to appear by chance.
SECRETS = ["s3cr3t-Str1ng-a91", "8675309123", "Dollar-Quoted-77f", "c0mment-Secret-x4", "775533119", "Unterm-9q"]


@pytest.mark.parametrize(("sql", "kind", "expected"), [
    ("SELECT 1", "SELECT", "SELECT ?"),
    ("select a from t where b = 'x''y' and c in (1.5, -3)", "SELECT", "select a from t where b = ? and c in (?, -?)"),
    ("INSERT INTO t VALUES (1,'a'),(2,'b')", "INSERT", "INSERT INTO t VALUES (?,?),(?,?)"),
    ("SELECT $$a 'b' c$$, $t$x$t$", "SELECT", "SELECT ?, ?"),
    ("SELECT 1 /* hidden */ -- hidden too\n FROM t", "SELECT", "SELECT ? FROM t"),
    ("SELECT 0x1F, 1e10, x'AB', DATE '2020-01-01'", "SELECT", "SELECT ?, ?, ?, DATE ?"),
    ("SELECT $1, ?", "SELECT", "SELECT $1, ?"),
    ("SELECT 'unterminated secret", "SELECT", "SELECT ?"),
    ("WITH q AS (SELECT 1) SELECT * FROM q", "WITH", "WITH q AS (SELECT ?) SELECT * FROM q"),
])
def test_normalise_redacts_every_literal(sql: str, kind: str, expected: str) -> None:
    assert normalise(sql) == (kind, expected)


def _run(uri: str, sql: str, token: str | None = None) -> None:
    kwargs = {"db_kwargs": {DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"}} if token else {}
    with flightsql.connect(uri, **kwargs) as conn, conn.cursor() as cur:  # type: ignore[arg-type]
        try:
            cur.execute(sql)
            cur.fetchall()
        except Exception:  # refused statements are logged too
            pass


def test_the_log_has_one_json_line_per_statement_and_no_secret(tmp_path: Path) -> None:
    users = write_users_file(tmp_path / "users.toml")
    args = ["--users", str(users), "--log-format", "json", "--slow-query-ms", "100000"]
    with serving(tmp_path / "wh", args) as server:
        from flight_server.cli.connect import login_token

        token = login_token(server.location, "wendy", PASSWORDS["wendy"])
        uri = server.location
        statements = [
            f"CREATE TABLE q AS SELECT '{SECRETS[0]}' AS s, {SECRETS[1]} AS n",
            f"INSERT INTO q SELECT $${SECRETS[2]}$$, 1 /* {SECRETS[3]} */",
            f"SELECT count(*) FROM q WHERE s <> '{SECRETS[0]}' AND n > {SECRETS[4]}",
            f"SELEC '{SECRETS[5]}",  # refused: bad SQL
        ]
        for sql in statements:
            _run(uri, sql, token)
    log = server.log  # after the stop: the query log is written by a thread, flushed at shutdown
    for secret in [*SECRETS, *PASSWORDS.values(), token]:
        assert secret not in log, secret
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines, log
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    queries = [line for line in lines if line["logger"] == "icefloe.querylog"]
    by_kind = [(q["kind"], q["status"]) for q in queries]
    assert by_kind == [("CREATE", "OK"), ("INSERT", "OK"), ("SELECT", "OK"), ("UNKNOWN", "INVALID_ARGUMENT")], queries
    assert {q["principal"] for q in queries} == {"wendy"}
    select = queries[2]
    assert select["sql"] == "SELECT count(*) FROM q WHERE s <> ? AND n > ?"
    assert select["rows"] == 1 and select["bytes"] > 0 and select["duration_ms"] > 0
    assert queries[1]["rows"] == 1 and queries[1]["sql"] == "INSERT INTO q SELECT ?, ?"
    assert not any(q["slow"] for q in queries)
    assert all(q["level"] == "INFO" for q in queries)


def test_slow_statements_are_warnings_in_text_format(tmp_path: Path) -> None:
    with serving(tmp_path / "wh", ["--slow-query-ms", "0"]) as server:
        _run(server.location, "SELECT 42 AS answer")
    log = server.log
    lines = [line for line in log.splitlines() if "icefloe.querylog" in line]
    assert len(lines) == 1, log
    assert " WARNING icefloe.querylog: kind=SELECT status=OK " in lines[0]
    assert "slow=true" in lines[0] and lines[0].endswith("sql=SELECT ? AS answer")
    assert "42" not in lines[0].split("sql=")[1]


def test_a_huge_statement_is_cut_and_still_redacted() -> None:
    """A 1 MB IN list (the trust-boundary test's) ran the tokenizer over all of it on the RPC
    thread, pushing that query past its timeout bound: now only the start is tokenized."""
    sql = "SELECT * FROM t WHERE id IN (" + ",".join(str(10_000 + i) for i in range(150_000)) + ")"
    kind, text = normalise(sql)
    assert kind == "SELECT"
    assert text.startswith("SELECT * FROM t WHERE id IN (?,?,?")
    assert len(text) < 20_000 and "more chars not logged" in text
    assert not any(ch.isdigit() for ch in text.split("... (")[0])
    secret = "SELECT '" + "k3y-" * 10_000 + "'"
    assert "k3y" not in normalise(secret)[1]


def _batches(count: int, fail_after: int | None = None) -> pa.RecordBatchReader:
    schema = pa.schema([("id", pa.int64())])

    def gen() -> Iterator[pa.RecordBatch]:
        for i in range(count):
            if fail_after is not None and i == fail_after:
                raise pa.ArrowInvalid("Invalid Input Error: boom")
            yield pa.record_batch([pa.array([i, i + 1, i + 2], pa.int64())], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records if r.name == "icefloe.querylog"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("count", [0, 1, QueryLog.READ_AHEAD - 1])
def test_a_result_within_the_read_ahead_is_logged_at_once_and_sent_as_a_table(
        caplog: pytest.LogCaptureFixture, count: int) -> None:
    log = QueryLog(Metrics(enabled=True), background=False)
    with caplog.at_level(logging.INFO, "icefloe.querylog"):
        out = log.streamed(_batches(count), "SELECT 1", "wendy", time.perf_counter())
        assert isinstance(out, pa.Table)  # nothing of it runs Python on gRPC's thread
        log.flush()
        assert [(f["status"], f["rows"], f["principal"]) for f in _lines(caplog)] == [("OK", 3 * count, "wendy")]
        assert out.num_rows == 3 * count and out.schema.names == ["id"]


def test_a_longer_result_is_counted_to_its_end(caplog: pytest.LogCaptureFixture) -> None:
    log = QueryLog(Metrics(enabled=True), background=False)
    with caplog.at_level(logging.INFO, "icefloe.querylog"):
        out = log.streamed(_batches(7), "SELECT id FROM t", None, time.perf_counter())
        assert isinstance(out, pa.RecordBatchReader)
        log.flush()
        assert _lines(caplog) == []  # not before the stream ends
        assert out.read_all().column("id").to_pylist() == [v for i in range(7) for v in (i, i + 1, i + 2)]
        log.flush()
        assert [(f["status"], f["rows"]) for f in _lines(caplog)] == [("OK", 21)]


@pytest.mark.parametrize("fail_after", [0, 1, QueryLog.READ_AHEAD, QueryLog.READ_AHEAD + 2])
def test_a_failed_stream_frees_its_reader_without_the_collector(fail_after: int) -> None:
    """The engine frees a query when its reader is dropped. A failure kept with its traceback
    made a reference cycle through the stream's frame that held the reader until the garbage
    collector ran (so its DuckDB result, and its slot until the end-of-call clean-up)."""
    log = QueryLog(Metrics(enabled=True), background=False)
    source = _batches(10, fail_after)
    freed = threading.Event()
    weakref.finalize(source, freed.set)

    def consume(out: pa.RecordBatchReader | pa.Table) -> str:
        try:
            out.read_all()
        except pa.ArrowInvalid as exc:  # dropped here, as gRPC drops it after sending it
            return str(exc)
        return ""

    gc.disable()
    try:
        out = log.streamed(source, "SELECT id FROM t", None, time.perf_counter())
        del source
        assert "boom" in consume(out)
        del out
        assert freed.is_set()
    finally:
        gc.enable()


@pytest.mark.parametrize("fail_after", [0, 1, QueryLog.READ_AHEAD, QueryLog.READ_AHEAD + 2])
def test_a_failure_reaches_the_client_from_the_stream_and_is_logged(
        caplog: pytest.LogCaptureFixture, fail_after: int) -> None:
    """Also when it happens inside the read-ahead: the client sees what it saw without it."""
    log = QueryLog(Metrics(enabled=True), background=False)
    with caplog.at_level(logging.INFO, "icefloe.querylog"):
        out = log.streamed(_batches(10, fail_after), "SELECT id FROM t", None, time.perf_counter())
        assert isinstance(out, pa.RecordBatchReader)
        got = []
        with pytest.raises(pa.ArrowInvalid, match="boom"):
            for batch in out:
                got.append(batch.num_rows)
        assert len(got) == fail_after
        log.flush()
        assert [(f["status"], f["rows"]) for f in _lines(caplog)] == [("UNKNOWN", 3 * fail_after)]
