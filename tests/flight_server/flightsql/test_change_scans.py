"""Change scans: exactly the rows appended by the commits with seq in (after, until], the same
every time for the same range, through a real server and pyarrow.flight."""

from __future__ import annotations

import json
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from flightsql_wire import any_of, field_bytes, statement_query
from servers import ServerProcess
from storage_kinds import ON_EVERY_STORAGE, Warehouse, open_catalog, start_server

SPLIT = [(b"icefloe.scan.target-partition-bytes", b"1")]
# Change scans read a local folder and S3 alike.
pytestmark = ON_EVERY_STORAGE


def _descriptor(**request: Any) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(json.dumps({"changes": "ns.t", **request}).encode())


def _scan(client: flight.FlightClient, after: int, until: int, headers: list[tuple[bytes, bytes]] | None = None,
          include: str = "appends") -> tuple[flight.FlightInfo, list[dict[str, Any]]]:
    info = client.get_flight_info(_descriptor(after=after, until=until, include=include),
                                  flight.FlightCallOptions(headers=headers or []))
    rows: list[dict[str, Any]] = []
    for endpoint in info.endpoints:
        table = client.do_get(endpoint.ticket).read_all()
        assert table.schema.equals(info.schema)
        rows.extend(table.to_pylist())
    return info, sorted(rows, key=lambda r: (r["_seq"], r["x"]))


def _append(server: ServerProcess, values: list[int]) -> int:
    result = do_put(server.location, ("ns", "t"), pa.table({"x": pa.array(values, pa.int64())}))
    return int(result["commit_seq"])


@pytest.fixture
def server(warehouse: Warehouse) -> Any:
    cat = open_catalog(warehouse, "t")
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    cat.create_table("ns.other", pa.schema([pa.field("x", pa.int64())]))
    cat.close()
    proc = start_server(warehouse).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_exactly_the_rows_of_the_range(server: ServerProcess) -> None:
    seqs = [_append(server, [i * 10, i * 10 + 1]) for i in range(5)]
    do_put(server.location, ("ns", "other"), pa.table({"x": pa.array([999], pa.int64())}))
    client = flight.FlightClient(server.location)
    info, rows = _scan(client, seqs[1], seqs[3])
    assert [(r["_seq"], r["x"], r["_operation"]) for r in rows] == [
        (seqs[2], 20, "append"), (seqs[2], 21, "append"), (seqs[3], 30, "append"), (seqs[3], 31, "append")]
    assert info.schema.names == ["x", "_seq", "_snapshot_id", "_operation"]
    assert info.total_records == 4
    meta = json.loads(info.app_metadata)
    assert meta == {"table": "ns.t", "after": seqs[1], "until": seqs[3], "non_appends": []}
    # empty range, and the whole history split by file
    assert _scan(client, seqs[2], seqs[2])[1] == []
    split, everything = _scan(client, seqs[0] - 1, seqs[4], SPLIT)
    assert len(split.endpoints) == 5 and not split.ordered
    assert [r["x"] for r in everything] == [0, 1, 10, 11, 20, 21, 30, 31, 40, 41]
    client.close()


def test_same_range_same_rows_after_compaction_and_restart(server: ServerProcess) -> None:
    seqs = [_append(server, [i]) for i in range(12)]
    client = flight.FlightClient(server.location)
    _, before = _scan(client, seqs[3], seqs[9])
    assert [r["x"] for r in before] == list(range(4, 10))
    assert _live_files(client) == 12
    body = json.dumps({"table": "ns.t", "orphan_grace_s": 3600}).encode()
    list(client.do_action(flight.Action("icefloe.maintain", body)))
    assert _live_files(client) < 12, "compaction rewrote the small files"
    assert _scan(client, seqs[3], seqs[9])[1] == before
    client.close()
    server.restart()
    client = flight.FlightClient(server.location)
    assert _scan(client, seqs[3], seqs[9], SPLIT)[1] == before
    client.close()


def _live_files(client: flight.FlightClient) -> int:
    info = client.get_flight_info(flight.FlightDescriptor.for_command(
        statement_query('SELECT count(*) AS n FROM ns."t$files"')))
    return int(client.do_get(info.endpoints[0].ticket).read_all().column("n")[0].as_py())


def test_non_append_commits_are_listed_and_schema_changes_read_right(server: ServerProcess) -> None:
    first = _append(server, [1, 2, 3])
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM ns.t WHERE x = 2")
        cur.execute("ALTER TABLE ns.t ADD COLUMN label VARCHAR")
        cur.execute("INSERT INTO ns.t VALUES (4, 'four')")
    client = flight.FlightClient(server.location)
    head = first + 3
    info, rows = _scan(client, first - 1, head)
    meta = json.loads(info.app_metadata)
    assert [(c["operation"], c["data_change"]) for c in meta["non_appends"]] == [("delete", True), ("schema", False)]
    # the rows each append added, read with the newest schema among them (by field id)
    assert info.schema.names == ["x", "label", "_seq", "_snapshot_id", "_operation"]
    assert [(r["x"], r["label"]) for r in rows] == [(1, None), (2, None), (3, None), (4, "four")]
    client.close()


def test_range_limits_and_bad_requests(server: ServerProcess) -> None:
    seq = _append(server, [1])
    client = flight.FlightClient(server.location)
    bad = [
        (dict(after=0, until=seq + 5), "beyond the commit head"),
        (dict(after=seq, until=seq - 1), "reversed"),
        (dict(after=-1, until=seq), "commit seq"),
        (dict(after="0", until=seq), "commit seq"),
        (dict(after=True, until=seq), "commit seq"),
        (dict(after=0, until=seq, include="some"), "include"),
        (dict(after=0, until=seq, extra=1), "unknown change scan field"),
    ]
    for request, message in bad:
        with pytest.raises(pa.ArrowInvalid, match=message):
            client.get_flight_info(_descriptor(**request))
    for raw in (b"{", b'{"changes": 5, "after": 0, "until": 1}', b'{"changes": "t", "after": 0, "until": 1}',
                b'{"changes": "ns.t", "after": 0, "until": 1, "split": [0, 2]}x'):
        with pytest.raises(pa.ArrowInvalid):
            client.get_flight_info(flight.FlightDescriptor.for_command(raw))
    with pytest.raises(pa.ArrowKeyError, match="does not exist"):
        client.get_flight_info(flight.FlightDescriptor.for_command(
            json.dumps({"changes": "ns.nope", "after": seq, "until": seq}).encode()))
    # a forged ticket: refused before anything runs
    forged = json.dumps({"changes": "ns.t", "after": 0, "until": seq, "include": "appends"}).encode()
    ticket = any_of("TicketStatementQuery", field_bytes(1, b"icefloe.chg.v2:" + b"A" * 43 + b":" + forged))
    with pytest.raises(pa.ArrowInvalid, match="not signed"):
        client.do_get(flight.Ticket(ticket)).read_all()
    client.close()


def test_expired_range_is_cursor_expired(warehouse: Warehouse) -> None:
    cat = open_catalog(warehouse, "t")
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([pa.field("x", pa.int64())]))
    for i in range(4):
        cat.load_table("ns.t").append(pa.table({"x": pa.array([i], pa.int64())}))
    head = cat.log.head()
    cat.log.trim(head - 2)
    cat.close()
    proc = start_server(warehouse).start()
    try:
        client = flight.FlightClient(proc.location)
        with pytest.raises(pa.ArrowInvalid, match="OUT_OF_RANGE: cursor expired"):
            client.get_flight_info(_descriptor(after=0, until=head))
        assert [r["x"] for r in _scan(client, head - 2, head)[1]] == [2, 3]
        client.close()
    finally:
        proc.stop()


def _changes(rows: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    return sorted((r["_seq"], r["_operation"], r["x"]) for r in rows)


def test_include_all_reads_deletes_and_updates_as_rows(server: ServerProcess, warehouse: Warehouse) -> None:
    first = _append(server, [1, 2, 3, 4])
    second = _append(server, [5, 6])
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM ns.t WHERE x = 2")
        cur.execute("UPDATE ns.t SET x = 30 WHERE x = 3")
        cur.execute("DELETE FROM ns.t WHERE x > 100")  # touches nothing
    client = flight.FlightClient(server.location)
    body = json.dumps({"table": "ns.t", "orphan_grace_s": 3600, "min_input_files": 2}).encode()
    list(client.do_action(flight.Action("icefloe.maintain", body)))  # compaction: a replace commit
    head = _head(warehouse)
    info, rows = _scan(client, first - 1, head, include="all")
    deleted_seq, updated_seq = second + 1, second + 2
    assert _changes(rows) == sorted([
        (first, "append", 1), (first, "append", 2), (first, "append", 3), (first, "append", 4),
        (second, "append", 5), (second, "append", 6),
        (deleted_seq, "delete", 2),
        (updated_seq, "delete", 3), (updated_seq, "insert", 30),
    ]), "carry-over rows (the survivors of each rewritten file) cancel out"
    meta = json.loads(info.app_metadata)
    listed = {c["seq"]: c for c in meta["non_appends"]}
    assert deleted_seq not in listed and updated_seq not in listed, "expressed as rows, not listed"
    assert all(not c["data_change"] for c in listed.values() if c["operation"] in ("replace", "expire")), listed
    assert info.total_records == -1
    # The same range split per commit / file, after a restart: the same rows.
    client.close()
    server.restart()
    client = flight.FlightClient(server.location)
    split, again = _scan(client, first - 1, head, SPLIT, include="all")
    assert len(split.endpoints) > 1 and _changes(again) == _changes(rows)
    # With "appends" the same commits are listed, as data changes.
    _, appended = _scan(client, first - 1, head)
    assert _changes(appended) == [r for r in _changes(rows) if r[1] == "append"]
    info = client.get_flight_info(_descriptor(after=first - 1, until=head))
    listed = {c["seq"]: c for c in json.loads(info.app_metadata)["non_appends"]}
    assert listed[deleted_seq] == {"seq": deleted_seq, "operation": "delete", "data_change": True}
    assert listed[updated_seq]["data_change"] is True
    client.close()


def _head(warehouse: Warehouse) -> int:
    cat = open_catalog(warehouse, "reader", read_only=True)
    try:
        return cat.log.head()
    finally:
        cat.close()


def _sql(server: ServerProcess, statement: str) -> None:
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)


def test_change_scan_of_a_dropped_table_is_not_found(server: ServerProcess) -> None:
    """The commit log and metadata files of a dropped table outlive it; a change scan must not
    answer its rows from them, at GetFlightInfo or at a DoGet of a ticket issued before."""
    seqs = [_append(server, [i]) for i in range(3)]
    client = flight.FlightClient(server.location)
    info, rows = _scan(client, seqs[0] - 1, seqs[2])
    assert [r["x"] for r in rows] == [0, 1, 2]
    _sql(server, "DROP TABLE ns.t")
    with pytest.raises(pa.ArrowKeyError, match="table ns.t does not exist"):
        client.get_flight_info(_descriptor(after=seqs[0] - 1, until=seqs[2]))
    # a range that ends before the drop, and one with no commit of the table in it
    with pytest.raises(pa.ArrowKeyError, match="table ns.t does not exist"):
        client.get_flight_info(_descriptor(after=seqs[0], until=seqs[1], include="all"))
    with pytest.raises(pa.ArrowKeyError, match="table ns.t does not exist"):
        client.do_get(info.endpoints[0].ticket).read_all()  # issued while the table existed
    # as a SELECT of it is (NOT_FOUND arrives in pyarrow as ArrowKeyError)
    with pytest.raises(pa.ArrowKeyError):
        client.get_flight_info(flight.FlightDescriptor.for_command(statement_query("SELECT * FROM ns.t")))
    client.close()


def test_change_scan_ticket_of_a_table_dropped_before_do_get_is_not_found(server: ServerProcess) -> None:
    seq = _append(server, [7])
    client = flight.FlightClient(server.location)
    info = client.get_flight_info(_descriptor(after=seq - 1, until=seq))
    _sql(server, "DROP TABLE ns.t")
    with pytest.raises(pa.ArrowKeyError, match="table ns.t does not exist"):
        client.do_get(info.endpoints[0].ticket).read_all()
    client.close()
