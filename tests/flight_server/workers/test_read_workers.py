"""``icefloe serve --read-workers 2``: reads planned by the primary run in worker processes.

One server for the module (with authentication, so tickets carry principals): results equal
the primary's own, endpoints name the workers, sessions / prepared statements / pinned
snapshots / a transaction's own writes work across the processes, a killed worker costs only
the call it was serving, and the workers end with the primary.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as dbapi
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from servers import ServerProcess

from flight_server.flightsql import protocol as p
from flight_server.security.users import hash_password

PASSWORDS = {"alice": "alice-Adm1n-wk-4c1e", "rita": "rita-R3ad-wk-77b0"}
ROLES = {"alice": "admin", "rita": "read"}
MAX = b"icefloe.scan.max-partitions"
TARGET = b"icefloe.scan.target-partition-bytes"
STARTED = re.compile(r"read worker (\d+) starting \(pid (\d+)\)")
READY = re.compile(r"read worker (\d+) ready on (\S+)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("workers")
    users = folder / "users.toml"
    users.write_text("".join(f'[users.{name}]\nrole = "{ROLES[name]}"\npassword_hash = "{hash_password(pw)}"\n\n'
                             for name, pw in PASSWORDS.items()))
    users.chmod(0o600)
    _make(folder / "warehouse")
    proc = ServerProcess(folder / "warehouse", ["--users", str(users), "--read-workers", "2"]).start()
    try:
        _wait_for(lambda: len(_ready(proc)) == 2, proc, "both workers ready")
        yield proc
    finally:
        proc.stop()


def _make(warehouse: Path) -> None:
    """wk.t: 1000 rows in four data files (a split scan has four parts to deal out)."""
    from catalog import RocksCatalog

    cat = RocksCatalog("t", warehouse=str(warehouse))
    try:
        cat.create_namespace("wk")
        cat.create_table("wk.t", pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.string())]))
        for part in range(4):
            ids = list(range(part * 250, part * 250 + 250))
            cat.load_table("wk.t").append(pa.table({"id": pa.array(ids, pa.int64()),
                                                    "label": [f"l{i % 7}" for i in ids]}))
    finally:
        cat.close()


def _wait_for(condition: Any, proc: ServerProcess, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{proc.log}")
        time.sleep(0.1)


def _ready(proc: ServerProcess) -> dict[int, str]:
    """Worker index -> its location, as last announced in the primary's log."""
    return {int(m.group(1)): m.group(2) for m in READY.finditer(proc.log)}


def _pids(proc: ServerProcess) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(2)) for m in STARTED.finditer(proc.log)}


def _adbc(proc: ServerProcess, user: str, **kwargs: Any) -> Any:
    return dbapi.connect(proc.location, db_kwargs={"username": user, "password": PASSWORDS[user]}, **kwargs)


def _client(location: str, user: str) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
    client = flight.FlightClient(location)
    header = client.authenticate_basic_token(user, PASSWORDS[user])
    return client, flight.FlightCallOptions(headers=[header])


def _info(proc: ServerProcess, user: str, sql: str, most: bytes = b"1",
          txn: bytes | None = None) -> flight.FlightInfo:
    client, options = _client(proc.location, user)
    opts = flight.FlightCallOptions(headers=[*options.headers, (TARGET, b"1"), (MAX, most)])
    cmd = p.CommandStatementQuery(query=sql, transaction_id=txn).pack()
    return client.get_flight_info(flight.FlightDescriptor.for_command(cmd), opts)


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)


def _read(location: str, user: str, info: flight.FlightInfo) -> list[dict[str, Any]]:
    client, options = _client(location, user)
    return _sorted(pa.concat_tables([client.do_get(e.ticket, options).read_all() for e in info.endpoints]))


def _worker_log_lines(proc: ServerProcess, marker: str) -> list[str]:
    return [line for line in proc.log_lines if "read worker" in line and marker in line and "querylog" in line]


def test_split_scan_endpoints_name_the_workers_and_equal_the_primary(server: ServerProcess) -> None:
    workers = set(_ready(server).values())
    info = _info(server, "rita", "SELECT id, label FROM wk.t", most=b"4")
    assert len(info.endpoints) == 4
    named = [[loc.uri.decode() for loc in e.locations] for e in info.endpoints]
    assert all(len(locs) == 1 and locs[0] in workers for locs in named), named
    assert {locs[0] for locs in named} == workers, "a split scan's parts are dealt over both workers"
    by_workers = []
    for endpoint in info.endpoints:
        client, options = _client(endpoint.locations[0].uri.decode(), "rita")
        by_workers.extend(client.do_get(endpoint.ticket, options).read_all().to_pylist())
    assert sorted(by_workers, key=repr) == _read(server.location, "rita", info)
    assert sorted(r["id"] for r in by_workers) == list(range(1000))


def test_adbc_reads_are_answered_by_workers(server: ServerProcess) -> None:
    with _adbc(server, "rita") as conn, conn.cursor() as cur:
        for _ in range(4):
            cur.execute("SELECT label, count(*) AS adbc_marker_n FROM wk.t GROUP BY label ORDER BY label")
            assert cur.fetchall() == [(f"l{i}", 143 if i < 6 else 142) for i in range(7)]
    _wait_for(lambda: len(_worker_log_lines(server, "adbc_marker_n")) >= 4, server, "the workers' query log")
    assert {re.search(r"read worker (\d)", line).group(1)  # type: ignore[union-attr]
            for line in _worker_log_lines(server, "adbc_marker_n")} == {"0", "1"}


def test_session_schema_and_prepared_parameters_across_workers(server: ServerProcess) -> None:
    with _adbc(server, "rita") as conn, conn.cursor() as cur:
        conn.adbc_current_db_schema = "wk"  # SetSessionOptions on the primary; the ticket carries it
        cur.execute("SELECT count(*) AS session_marker FROM t WHERE id < 10")
        assert cur.fetchall() == [(10,)]
        for wanted in (3, 777):
            cur.execute("SELECT id AS prepared_marker, label FROM t WHERE id = ?", parameters=(wanted,))
            assert cur.fetchall() == [(wanted, f"l{wanted % 7}")]
    _wait_for(lambda: _worker_log_lines(server, "session_marker") and
              len(_worker_log_lines(server, "prepared_marker")) >= 2, server, "the workers' query log")


def test_pinned_snapshot_and_read_after_write(server: ServerProcess) -> None:
    pinned = _info(server, "rita", "SELECT count(*) AS n FROM wk.t")
    with _adbc(server, "alice") as conn, conn.cursor() as cur:
        cur.execute("SELECT snapshot_id FROM wk.\"t$snapshots\" ORDER BY committed_at DESC LIMIT 1")
        (before,) = cur.fetchone()
        for k in range(3):
            cur.execute(f"INSERT INTO wk.t VALUES ({5000 + k}, 'new')")
            # The next read, run by a worker, sees the commit the primary just made.
            cur.execute("SELECT count(*) FROM wk.t WHERE label = 'new'")
            assert cur.fetchall() == [(k + 1,)]
        cur.execute(f"SELECT count(*) FROM wk.t AT (VERSION => {before})")
        assert cur.fetchall() == [(1000,)]
        cur.execute("DELETE FROM wk.t WHERE label = 'new'")
    # The ticket planned before the inserts reads its own snapshot on a worker.
    assert pinned.endpoints[0].locations
    assert _read(pinned.endpoints[0].locations[0].uri.decode(), "rita", pinned) == [{"n": 1000}]


def test_transaction_reads_its_own_writes_on_the_primary(server: ServerProcess) -> None:
    client, options = _client(server.location, "alice")
    begin = flight.Action("BeginTransaction", p.ActionBeginTransactionRequest().pack())
    tid = p.ActionBeginTransactionResult.unpack(
        list(client.do_action(begin, options))[0].body.to_pybytes()).transaction_id
    cmd = p.CommandStatementUpdate(query="INSERT INTO wk.t VALUES (9001, 'txn')", transaction_id=tid).pack()
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(cmd), pa.schema([]), options)
    writer.done_writing()
    reader.read()
    writer.close()
    info = _info(server, "alice", "SELECT id FROM wk.t WHERE label = 'txn'", txn=tid)
    assert [list(e.locations) for e in info.endpoints] == [[]], "staged writes live in the primary only"
    assert _read(server.location, "alice", info) == [{"id": 9001}]
    outside = _info(server, "alice", "SELECT id FROM wk.t WHERE label = 'txn'")
    assert _read(outside.endpoints[0].locations[0].uri.decode(), "alice", outside) == []
    end = p.ActionEndTransactionRequest(transaction_id=tid, action=p.END_TRANSACTION_ROLLBACK).pack()
    list(client.do_action(flight.Action("EndTransaction", end), options))
    with _adbc(server, "alice", autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO wk.t VALUES (9002, 'txn')")
        cur.execute("SELECT id FROM wk.t WHERE label = 'txn'")
        assert cur.fetchall() == [(9002,)]
        conn.rollback()
        cur.execute("SELECT count(*) FROM wk.t WHERE label = 'txn'")
        assert cur.fetchall() == [(0,)]


def test_forged_and_altered_tickets_are_refused_by_a_worker(server: ServerProcess) -> None:
    info = _info(server, "rita", "SELECT id FROM wk.t WHERE id = 1")
    location = info.endpoints[0].locations[0].uri.decode()
    client, options = _client(location, "rita")
    ticket = info.endpoints[0].ticket.ticket
    any_msg = p.TicketStatementQuery.unpack(ticket)
    altered = bytearray(any_msg.statement_handle)
    at = bytes(altered).index(b"id = 1")
    altered[at + 5] = ord("2")  # "id = 2": same length, signature no longer matches
    for bad in (p.TicketStatementQuery(bytes(altered)).pack(),
                p.TicketStatementQuery(b"icefloe.stmt.forged").pack(), b"not a ticket"):
        with pytest.raises(pa.ArrowInvalid, match="INVALID_ARGUMENT") as caught:  # gRPC INVALID_ARGUMENT
            client.do_get(flight.Ticket(bad), options).read_all()
        assert "Traceback" not in str(caught.value)
    assert client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"id": 1}]


def test_a_ticket_runs_only_for_its_user(server: ServerProcess) -> None:
    info = _info(server, "rita", "SELECT id FROM wk.t WHERE id = 5")
    location = info.endpoints[0].locations[0].uri.decode()
    for where in (location, server.location):
        alice, options = _client(where, "alice")
        with pytest.raises(flight.FlightUnauthorizedError, match="another user"):
            alice.do_get(info.endpoints[0].ticket, options).read_all()
        with pytest.raises(flight.FlightUnauthenticatedError):
            flight.FlightClient(where).do_get(info.endpoints[0].ticket).read_all()


def test_jdbc_reads_through_workers(server: ServerProcess, tmp_path: Path) -> None:
    """The Arrow Flight SQL JDBC driver follows the worker locations, with the user's credentials."""
    from jdbc_support import run_java_program

    host, port = server.location.removeprefix("grpc://").rsplit(":", 1)
    url = (f"jdbc:arrow-flight-sql://{host}:{port}/?useEncryption=false&user=rita"
           f"&password={PASSWORDS['rita']}")
    proc = run_java_program(Path(__file__).with_name("JdbcThroughWorkers.java"), tmp_path, [url])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["count=1000", "label=l5"]
    _wait_for(lambda: _worker_log_lines(server, "jdbc_marker") and _worker_log_lines(server, "jdbc_prepared_marker"),
              server, "the workers' query log")


def test_kill_9_of_a_worker_costs_only_the_call_in_flight(server: ServerProcess) -> None:
    info = _info(server, "rita", "SELECT a.id, b.id AS id2, a.label FROM wk.t a, wk.t b, wk.t c")
    location = info.endpoints[0].locations[0].uri.decode()
    index = next(i for i, loc in _ready(server).items() if loc == location)
    victim = _pids(server)[index]
    client, options = _client(location, "rita")
    stream = client.do_get(info.endpoints[0].ticket, options)
    stream.read_chunk()  # the stream is flowing
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(flight.FlightUnavailableError):
        while True:
            stream.read_chunk()
    # The client's next queries succeed: the rotation skips the dead worker.
    with _adbc(server, "rita") as conn, conn.cursor() as cur:
        for _ in range(4):
            cur.execute("SELECT count(*) FROM wk.t")
            assert cur.fetchall() == [(1000,)]
    # ... and the worker is started again and rejoins the rotation.
    _wait_for(lambda: _pids(server).get(index) not in (None, victim) and len(_ready(server)) == 2
              and READY.findall(server.log).count((str(index), _ready(server)[index])) >= 1
              and server.log.rfind(f"read worker {index} ready") > server.log.rfind(f"pid {victim})"),
              server, "the worker's restart")
    assert f"read worker {index} (pid {victim}) exited" in server.log
    seen = {e.locations[0].uri.decode() for e in _info(server, "rita", "SELECT id FROM wk.t", most=b"4").endpoints}
    assert seen == set(_ready(server).values())
    assert _read(_ready(server)[index], "rita", _info(server, "rita", "SELECT count(*) AS n FROM wk.t")) \
        == [{"n": 1000}]


def test_workers_end_when_the_primary_is_killed(server: ServerProcess) -> None:
    """Last in the module: it kills the module's server."""
    pids = [pid for pid in _pids(server).values() if _alive(pid)]
    assert len(pids) == 2
    server.kill()
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"workers outlived the primary: {[p for p in pids if _alive(p)]}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_read_workers_flag_reads_the_environment(tmp_path: Path) -> None:
    """``ICEFLOE_READ_WORKERS`` is the flag's variable (checked through click, no server)."""
    from click.testing import CliRunner

    from flight_server.cli.main import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert "--read-workers" in result.output
    bad = CliRunner().invoke(main, ["serve", "--warehouse", str(tmp_path)], env={"ICEFLOE_READ_WORKERS": "-1"})
    assert bad.exit_code == 2 and "read-workers" in bad.output
