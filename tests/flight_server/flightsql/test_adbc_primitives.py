"""Change scans and two-phase appends through stock ADBC (adbc_driver_flightsql), against a real
server: SQL ``icefloe.changes(...)`` answers the JSON change scan's FlightInfo; bulk ingest with
the ``x-icefloe-stage`` call-header option stages, ``CALL icefloe.commit_staged / abort_staged``
commit or abort; bad input gets a precise status and commits nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from servers import ServerProcess, serving

from flight_server.security.users import hash_password

HEADER = "adbc.flight.sql.rpc.call_header."
STAGE = HEADER + "x-icefloe-stage"
SPLIT = HEADER + "icefloe.scan.target-partition-bytes"
Status = adbc_driver_manager.AdbcStatusCode


def _make(warehouse: Path) -> None:
    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())]))
        cat.create_table("ns.other", pa.schema([pa.field("x", pa.int64()), pa.field("s", pa.string())]))
    finally:
        cat.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    warehouse = tmp_path / "warehouse"
    _make(warehouse)
    with serving(warehouse) as proc:
        yield proc
    assert "Traceback" not in proc.log, proc.log


def _rows(values: list[int]) -> pa.Table:
    return pa.table({"x": pa.array(values, pa.int64()), "s": [f"v{v}" for v in values]})


def _append(server: ServerProcess, values: list[int], table: str = "t") -> int:
    return int(do_put(server.location, ("ns", table), _rows(values))["commit_seq"])


def _head(server: ServerProcess) -> int:
    from catalog import RocksCatalog

    cat = RocksCatalog("reader", warehouse=str(server.warehouse), **{"read-only": "true"})
    try:
        return int(cat.log.head())
    finally:
        cat.close()


def _json_scan(server: ServerProcess, **request: Any) -> tuple[flight.FlightInfo, pa.Table]:
    client = flight.FlightClient(server.location)
    try:
        descriptor = flight.FlightDescriptor.for_command(json.dumps({"changes": "ns.t", **request}).encode())
        info = client.get_flight_info(descriptor)
        tables = [client.do_get(e.ticket).read_all() for e in info.endpoints]
        return info, pa.concat_tables(tables) if tables else info.schema.empty_table()
    finally:
        client.close()


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r["_seq"], r["_operation"], r["x"]))


def _status(exc: pytest.ExceptionInfo[Exception]) -> Any:
    assert isinstance(exc.value, adbc_driver_manager.Error), exc.value
    return exc.value.status_code


def _all_refused(cur: Any, bad: list[tuple[str, Any, str]]) -> None:
    """Each statement fails with its status and a message matching its pattern."""
    for sql, status, message in bad:
        with pytest.raises(adbc_driver_manager.Error, match=message) as err:
            cur.execute(sql)
        assert _status(err) == status, (sql, err.value)


def test_change_scan_as_sql_equals_the_json_change_scan(server: ServerProcess) -> None:
    seqs = [_append(server, [i * 10, i * 10 + 1]) for i in range(6)]
    _append(server, [999], table="other")
    info, expected = _json_scan(server, after=seqs[1], until=seqs[4])
    assert expected.num_rows == 6
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM icefloe.changes('ns.t', after => {seqs[1]}, until => {seqs[4]})")
        got = cur.fetch_arrow_table()
        assert got.schema.names == ["x", "s", "_seq", "_snapshot_id", "_operation"]
        assert got.schema.remove_metadata().equals(info.schema.remove_metadata())
        assert _sorted(got) == _sorted(expected)
        # Bound parameters, names in any case, the table named as an argument, CALL form.
        cur.execute('select * from ICEFLOE.Changes("table" => ?, until => ?, after => ?)',
                    ("ns.t", seqs[4], seqs[1]))
        assert _sorted(cur.fetch_arrow_table()) == _sorted(expected)
        cur.execute(f"CALL icefloe.changes('ns.t', after => {seqs[1]}, until => {seqs[4]}, include => 'appends')")
        assert _sorted(cur.fetch_arrow_table()) == _sorted(expected)
        # An empty range: the schema, no rows.
        cur.execute(f"SELECT * FROM icefloe.changes('ns.t', after => {seqs[2]}, until => {seqs[2]})")
        empty = cur.fetch_arrow_table()
        assert empty.num_rows == 0 and empty.schema.names == got.schema.names


def test_change_scan_partitions_through_adbc(server: ServerProcess) -> None:
    seqs = [_append(server, [i]) for i in range(5)]
    _, expected = _json_scan(server, after=seqs[0] - 1, until=seqs[-1])
    with flight_sql.connect(server.location, autocommit=True, conn_kwargs={SPLIT: "1"}) as conn:
        with conn.cursor() as cur:
            partitions, schema = cur.adbc_execute_partitions(
                f"SELECT * FROM icefloe.changes('ns.t', after => {seqs[0] - 1}, until => {seqs[-1]})"
            )
            assert len(partitions) == 5, "one endpoint per appended file"
            tables = []
            for partition in partitions:
                cur.adbc_read_partition(partition)
                tables.append(cur.fetch_arrow_table())
        assert _sorted(pa.concat_tables(tables)) == _sorted(expected)
        assert [r["x"] for r in _sorted(expected)] == [0, 1, 2, 3, 4]


def test_change_scan_include_all_through_adbc(server: ServerProcess) -> None:
    first = _append(server, [1, 2, 3])
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM ns.t WHERE x = 2")
        head = _head(server)
        cur.execute(f"SELECT * FROM icefloe.changes('ns.t', after => {first - 1}, until => {head}, include => 'all')")
        got = sorted((r["_seq"], r["_operation"], r["x"]) for r in cur.fetch_arrow_table().to_pylist())
    assert got == [(first, "append", 1), (first, "append", 2), (first, "append", 3), (head, "delete", 2)]


def test_change_scan_bad_input_is_precise(server: ServerProcess) -> None:
    seq = _append(server, [1])
    bad = [
        (f"SELECT * FROM icefloe.changes('ns.nope', after => 0, until => {seq})", Status.NOT_FOUND, "does not exist"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0, until => {seq + 5})", Status.INVALID_ARGUMENT,
         "beyond the commit head"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => {seq}, until => 0)", Status.INVALID_ARGUMENT, "reversed"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => -1, until => {seq})", Status.INVALID_ARGUMENT, "commit seq"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => '0', until => {seq})", Status.INVALID_ARGUMENT,
         "commit seq"),
        ("SELECT * FROM icefloe.changes('ns.t', after => 0)", Status.INVALID_ARGUMENT, "needs until"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0, until => {seq}, since => 1)", Status.INVALID_ARGUMENT,
         "no argument 'since'"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0, after => 1, until => {seq})", Status.INVALID_ARGUMENT,
         "given twice"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0, until => {seq}, include => 'some')",
         Status.INVALID_ARGUMENT, "include"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0 + 1, until => {seq})", Status.INVALID_ARGUMENT,
         "literal"),
        (f"SELECT x FROM icefloe.changes('ns.t', after => 0, until => {seq})", Status.INVALID_ARGUMENT,
         "statement of its own"),
        (f"SELECT * FROM icefloe.changes('ns.t', after => 0, until => {seq}) WHERE x > 0", Status.INVALID_ARGUMENT,
         "statement of its own"),
        (f"SELECT count(*) FROM (SELECT * FROM icefloe.changes('ns.t', after => 0, until => {seq}))",
         Status.INVALID_ARGUMENT, "statement of its own"),
        ("SELECT * FROM icefloe.changes('ns.t', after => 0, until => ", Status.INVALID_ARGUMENT, "usage"),
        (f"SELECT * FROM icefloe.changes('t', after => 0, until => {seq})", Status.INVALID_ARGUMENT, "namespace"),
    ]
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        _all_refused(cur, bad)
        # Still serving, and plain SQL that merely mentions the name is SQL as before.
        cur.execute("SELECT 'icefloe.changes(' AS s")
        assert cur.fetchall() == [("icefloe.changes(",)]
    assert server.proc is not None and server.proc.poll() is None


def test_expired_change_range_is_out_of_range(tmp_path: Path) -> None:
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    _make(warehouse)
    cat = RocksCatalog("t", warehouse=str(warehouse))
    for i in range(4):
        cat.load_table("ns.t").append(_rows([i]))
    head = cat.log.head()
    cat.log.trim(head - 2)
    cat.close()
    with serving(warehouse) as proc, flight_sql.connect(proc.location, autocommit=True) as conn:
        with conn.cursor() as cur:
            with pytest.raises(adbc_driver_manager.Error, match="cursor expired"):
                cur.execute(f"SELECT * FROM icefloe.changes('ns.t', after => 0, until => {head})")
            cur.execute(f"SELECT * FROM icefloe.changes('ns.t', after => {head - 2}, until => {head})")
            assert sorted(r["x"] for r in cur.fetch_arrow_table().to_pylist()) == [2, 3]


def _count(cur: Any, table: str = "ns.t") -> int:
    cur.execute(f"SELECT count(*) FROM {table}")
    return int(cur.fetchone()[0])


def _staged_ingest(conn: Any, data: pa.Table, job: str, table: str = "t", mode: str = "append",
                   **options: str) -> int:
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{STAGE: job, **options})
        return int(cur.adbc_ingest(table, data, mode=mode, db_schema_name="ns"))


def test_staged_ingest_commits_once_by_job(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn:
        head = _head(server)
        assert _staged_ingest(conn, _rows(list(range(0, 50))), "job-a") == 50
        assert _staged_ingest(conn, _rows(list(range(50, 80))), "job-a") == 30
        assert _staged_ingest(conn, _rows([1000]), "job-b") == 1
        assert _head(server) == head, "staging commits nothing"
        with conn.cursor() as cur:
            assert _count(cur) == 0
            cur.adbc_ingest("t", _rows([500, 501]), mode="append", db_schema_name="ns")  # an ordinary append
            assert _count(cur) == 2
            before = _head(server)
            cur.execute("CALL icefloe.commit_staged('ns.t', job => 'job-a', idempotency_key => 'k-a')")
            answer = cur.fetch_arrow_table()
            assert answer.schema.names == ["table", "commit_seq", "snapshot_id", "rows", "duplicate"]
            (row,) = answer.to_pylist()
            assert row["table"] == "ns.t" and row["rows"] == 80 and row["duplicate"] is False
            assert row["commit_seq"] == before + 1 == _head(server), "both stagings: one commit"
            assert _count(cur) == 82
            # A retry with the key answers the first result; another key is refused.
            cur.execute("SELECT * FROM icefloe.commit_staged('ns.t', job => 'job-a', idempotency_key => 'k-a')")
            (again,) = cur.fetch_arrow_table().to_pylist()
            assert again == {**row, "duplicate": True}
            with pytest.raises(adbc_driver_manager.Error, match="FAILED_PRECONDITION: .*committed already"):
                cur.execute("CALL icefloe.commit_staged('ns.t', job => 'job-a', idempotency_key => 'k-2')")
        # As an update (Flight SQL CommandStatementUpdate, on a statement of its own): the row count.
        with conn.cursor() as cur:
            statement = cur.adbc_statement
            statement.set_sql_query("CALL icefloe.commit_staged('ns.t', job => 'job-b')")
            assert statement.execute_update() == 1
            assert _count(cur) == 83 and _head(server) == before + 2


def test_staged_ingest_aborted_by_job_is_gone(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn:
        _staged_ingest(conn, _rows([1, 2, 3]), "job-x")
        head = _head(server)
        with conn.cursor() as cur:
            cur.execute("CALL icefloe.abort_staged('ns.t', job => 'job-x')")
            (answer,) = cur.fetch_arrow_table().to_pylist()
            assert answer["table"] == "ns.t" and answer["aborted"] == 1 and answer["files"] >= 1
            with pytest.raises(adbc_driver_manager.Error, match="no staged appends of job 'job-x'") as err:
                cur.execute("CALL icefloe.commit_staged('ns.t', job => 'job-x')")
            assert _status(err) == Status.NOT_FOUND
            assert _count(cur) == 0 and _head(server) == head


def _staged_token(server: ServerProcess, values: list[int], job: str = "job-t") -> str:
    return str(do_put(server.location, ("ns", "t"), _rows(values), stage=job)["token"])


def test_commit_by_tokens_and_bad_input_commit_nothing(server: ServerProcess) -> None:
    token = _staged_token(server, [7, 8])
    prefix, mac, body = token.split(":", 2)
    forged = f"{prefix}:{'A' * len(mac)}:{body}"
    head = _head(server)
    bad = [
        (f"CALL icefloe.commit_staged('ns.t', tokens => ['{forged}'])", Status.INVALID_ARGUMENT,
         "not signed"),
        ("CALL icefloe.commit_staged('ns.t', tokens => ['nonsense'])", Status.INVALID_ARGUMENT,
         "staging token"),
        (f"CALL icefloe.commit_staged('ns.other', tokens => ['{token}'])", Status.INVALID_ARGUMENT,
         "another table"),
        (f"CALL icefloe.commit_staged('ns.t', tokens => ['{token}', '{token}'])", Status.INVALID_ARGUMENT,
         "more than once"),
        (f"CALL icefloe.commit_staged('ns.t', job => 'job-t', tokens => ['{token}'])",
         Status.INVALID_ARGUMENT, "either job or tokens"),
        ("CALL icefloe.commit_staged('ns.t')", Status.INVALID_ARGUMENT, "either job or tokens"),
        ("CALL icefloe.commit_staged('ns.nope', job => 'job-t')", Status.NOT_FOUND, "does not exist"),
        ("CALL icefloe.commit_staged('ns.t', job => 'job-none')", Status.NOT_FOUND, "no staged appends"),
        ("CALL icefloe.commit_staged('ns.t', job => 5)", Status.INVALID_ARGUMENT, "job must be a string"),
        ("CALL icefloe.commit_staged('t', job => 'job-t')", Status.INVALID_ARGUMENT, "qualified"),
        ("CALL icefloe.commit_staged('ns.t', job => 'job-t', key => 'k')", Status.INVALID_ARGUMENT,
         "no argument 'key'"),
        ("CALL icefloe.abort_staged('ns.t', job => 'job-t', idempotency_key => 'k')",
         Status.INVALID_ARGUMENT, "no argument 'idempotency_key'"),
        ("CALL icefloe.commit_staged('ns.t', job => '')", Status.INVALID_ARGUMENT, "job id"),
        ("CALL icefloe.commit_staged('ns.t', job => 'job-t') LIMIT 1", Status.INVALID_ARGUMENT,
         "statement of its own"),
    ]
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        _all_refused(cur, bad)
        assert _head(server) == head and _count(cur) == 0, "nothing was committed"
        # The real token commits (once) with a bound token list.
        cur.execute("CALL icefloe.commit_staged(?, tokens => [?], idempotency_key => ?)",
                    ("ns.t", token, "k-tok"))
        (row,) = cur.fetch_arrow_table().to_pylist()
        assert row["rows"] == 2 and row["commit_seq"] == head + 1
        assert _count(cur) == 2


def test_staged_ingest_bad_input_stages_nothing(server: ServerProcess) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn:
        head = _head(server)
        cases = [
            (dict(table="nope"), Status.NOT_FOUND, "does not exist"),
            (dict(mode="create"), Status.INVALID_ARGUMENT, "use mode 'append'"),
            (dict(mode="replace"), Status.INVALID_ARGUMENT, "use mode 'append'"),
            (dict(options={HEADER + "x-icefloe-idempotency-key": "k"}), Status.INVALID_ARGUMENT,
             "takes no idempotency key"),
            (dict(data=pa.table({"y": pa.array(["no"])})), Status.INVALID_ARGUMENT, "schema mismatch"),
        ]
        for case, status, message in cases:
            kwargs: dict[str, Any] = dict(case)
            data = kwargs.pop("data", _rows([1]))
            options = kwargs.pop("options", {})
            with pytest.raises(adbc_driver_manager.Error, match=message) as err:
                _staged_ingest(conn, data, "job-bad", **kwargs, **options)
            assert _status(err) == status, (case, err.value)
        with pytest.raises(adbc_driver_manager.Error, match="job id") as err:
            _staged_ingest(conn, _rows([1]), "x" * 300)
        assert _status(err) == Status.INVALID_ARGUMENT
        with conn.cursor() as cur:
            with pytest.raises(adbc_driver_manager.Error, match="no staged appends") as err:
                cur.execute("CALL icefloe.commit_staged('ns.t', job => 'job-bad')")
            assert _status(err) == Status.NOT_FOUND
            assert _count(cur) == 0
        assert _head(server) == head


def test_a_job_commits_only_the_callers_stagings(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    _make(warehouse)
    people = {"wanda": ("write", "wanda-pw-4c1e9a"), "walt": ("write", "walt-pw-77d2f0"),
              "rita": ("read", "rita-pw-0b3c"), "ada": ("admin", "ada-pw-a9")}
    users = tmp_path / "users.toml"
    users.write_text("".join(
        f'[users.{n}]\nrole = "{r}"\npassword_hash = "{hash_password(p)}"\n\n' for n, (r, p) in people.items()
    ))
    with serving(warehouse, ["--users", str(users)]) as proc:
        def connect(name: str) -> Any:
            return flight_sql.connect(proc.location, autocommit=True,
                                      db_kwargs={"username": name, "password": people[name][1]})

        with connect("wanda") as wanda, connect("walt") as walt, connect("rita") as rita, connect("ada") as ada:
            _staged_ingest(wanda, _rows([1, 2]), "shared-job")
            _staged_ingest(walt, _rows([3]), "shared-job")
            with rita.cursor() as cur:
                with pytest.raises(adbc_driver_manager.Error) as err:
                    cur.execute("CALL icefloe.commit_staged('ns.t', job => 'shared-job')")
                assert _status(err) == Status.UNAUTHORIZED
                with pytest.raises(adbc_driver_manager.Error) as err:
                    _staged_ingest(rita, _rows([9]), "rita-job")
                assert _status(err) == Status.UNAUTHORIZED
            with walt.cursor() as cur:
                cur.execute("CALL icefloe.commit_staged('ns.t', job => 'shared-job', idempotency_key => 'w')")
                assert cur.fetch_arrow_table().to_pylist()[0]["rows"] == 1, "walt's staging only"
            with ada.cursor() as cur:
                cur.execute("CALL icefloe.abort_staged('ns.t', job => 'shared-job')")
                (answer,) = cur.fetch_arrow_table().to_pylist()
                assert answer["aborted"] == 1, "the admin sees wanda's staging (walt's is committed)"
            with wanda.cursor() as cur:
                assert _count(cur) == 1
