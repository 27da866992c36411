"""DML over ADBC: INSERT / DELETE / UPDATE / TRUNCATE, each one commit; pyiceberg sees what SQL sees."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import adbc_driver_manager
import pyarrow.flight as flight
import pytest
from servers import ServerProcess
from sqlwrites_lib import ON_BOTH_STORAGES, execute_rowcount, log_head, log_records, rows, scalar, update


def _pyiceberg_rows(reader_catalog: Any, name: str, order: str) -> list[dict[str, Any]]:
    table = reader_catalog.load_table(name).scan().to_arrow()
    return sorted(table.to_pylist(), key=lambda r: r[order])


def _make(conn: Any, ns: str) -> None:
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id BIGINT NOT NULL, name VARCHAR, amount DECIMAL(10, 2))")


@ON_BOTH_STORAGES
def test_insert_values_positional_column_list_and_by_name(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_a")
    head = log_head(reader_catalog)
    assert update(conn, "INSERT INTO dml_a.t VALUES (1, 'ann', 1.5), (2, 'bob', 2.25)") == 2
    assert update(conn, "INSERT INTO dml_a.t (name, id) VALUES ('cy', 3)") == 1
    assert update(conn, "INSERT INTO dml_a.t BY NAME SELECT 4.75 AS amount, 4 AS id") == 1
    # Through ADBC cursor.execute (the statement is prepared, announced as an update).
    assert execute_rowcount(conn, "INSERT INTO dml_a.t SELECT id + 10, name, amount FROM dml_a.t WHERE id <= 2") == 2
    records = log_records(reader_catalog, head)
    assert [r.operation for r in records] == ["append"] * 4
    assert [r.added_rows for r in records] == [2, 1, 1, 2]
    assert records[-1].extra["sql"].startswith("INSERT INTO dml_a.t SELECT")
    expected = [
        {"id": 1, "name": "ann", "amount": Decimal("1.50")}, {"id": 2, "name": "bob", "amount": Decimal("2.25")},
        {"id": 3, "name": "cy", "amount": None}, {"id": 4, "name": None, "amount": Decimal("4.75")},
        {"id": 11, "name": "ann", "amount": Decimal("1.50")}, {"id": 12, "name": "bob", "amount": Decimal("2.25")},
    ]
    assert rows(conn, "SELECT * FROM dml_a.t ORDER BY id") == expected
    assert _pyiceberg_rows(reader_catalog, "dml_a.t", "id") == expected


def test_insert_with_parameters(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_b")
    head = log_head(reader_catalog)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO dml_b.t (id, name) VALUES (?, ?)", [(1, "p"), (2, "q"), (3, None)])
        assert cur.rowcount == 3
    assert [(r.operation, r.added_rows) for r in log_records(reader_catalog, head)] == [("append", 3)]  # one commit
    assert rows(conn, "SELECT id, name FROM dml_b.t ORDER BY id") == [
        {"id": 1, "name": "p"}, {"id": 2, "name": "q"}, {"id": 3, "name": None}]
    assert execute_rowcount(conn, "DELETE FROM dml_b.t WHERE id = ?", [2]) == 1
    assert update(conn, "UPDATE dml_b.t SET name = ? WHERE id = ?", ("z", 3)) == 1
    assert _pyiceberg_rows(reader_catalog, "dml_b.t", "id") == [
        {"id": 1, "name": "p", "amount": None}, {"id": 3, "name": "z", "amount": None}]


def _files(reader_catalog: Any, name: str) -> set[str]:
    table = reader_catalog.load_table(name)
    return {task.file.file_path for task in table.scan().plan_files()}


@ON_BOTH_STORAGES
def test_delete_rewrites_only_affected_files(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_c")
    for start in (0, 100, 200):  # three appends -> three data files with disjoint id ranges
        update(conn, f"INSERT INTO dml_c.t SELECT range, 'n' || range, range / 4 FROM range({start}, {start + 100})")
    before = _files(reader_catalog, "dml_c.t")
    assert len(before) == 3
    head = log_head(reader_catalog)
    assert update(conn, "DELETE FROM dml_c.t WHERE id BETWEEN 110 AND 119") == 10
    after = _files(reader_catalog, "dml_c.t")
    assert len(before & after) == 2 and len(after - before) == 1  # one file rewritten, two untouched
    # A whole file deleted: dropped without a rewrite.
    assert update(conn, "DELETE FROM dml_c.t AS x WHERE x.id >= 200") == 100
    assert len(_files(reader_catalog, "dml_c.t")) == 2
    # Nothing selected: no commit at all.
    assert update(conn, "DELETE FROM dml_c.t WHERE id < 0") == 0
    records = log_records(reader_catalog, head)
    # The rows a reader sees removed (issue 38): 10, not the 100 of the rewritten file.
    assert [(r.operation, r.added_rows, r.deleted_rows) for r in records] == [("delete", 0, 10), ("delete", 0, 100)]
    assert scalar(conn, "SELECT count(*) FROM dml_c.t") == 190
    ids = [r["id"] for r in _pyiceberg_rows(reader_catalog, "dml_c.t", "id")]
    assert ids == [i for i in range(200) if not 110 <= i <= 119]


def test_delete_with_null_condition_keeps_the_row(conn: Any) -> None:
    _make(conn, "dml_d")
    update(conn, "INSERT INTO dml_d.t VALUES (1, NULL, 1), (2, 'b', 2)")
    assert update(conn, "DELETE FROM dml_d.t WHERE name <> 'b'") == 0  # NULL <> 'b' is NULL: kept
    assert update(conn, "DELETE FROM dml_d.t WHERE name = 'b' OR id IN (SELECT 99)") == 1
    assert rows(conn, "SELECT id FROM dml_d.t") == [{"id": 1}]


@ON_BOTH_STORAGES
def test_update_applies_set_where_condition_holds(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_e")
    update(conn, "INSERT INTO dml_e.t VALUES (1, 'a', 10), (2, 'b', 20), (3, NULL, 30)")
    update(conn, "INSERT INTO dml_e.t VALUES (4, 'd', 40)")
    untouched = _files(reader_catalog, "dml_e.t")
    head = log_head(reader_catalog)
    assert update(conn, "UPDATE dml_e.t SET amount = amount * 2, name = upper(name) WHERE id <= 2") == 2
    assert update(conn, "UPDATE dml_e.t AS x SET name = 'none' WHERE x.name IS NULL") == 1
    records = log_records(reader_catalog, head)
    assert [r.operation for r in records] == ["overwrite", "overwrite"]
    expected = [
        {"id": 1, "name": "A", "amount": Decimal("20.00")}, {"id": 2, "name": "B", "amount": Decimal("40.00")},
        {"id": 3, "name": "none", "amount": Decimal("30.00")}, {"id": 4, "name": "d", "amount": Decimal("40.00")},
    ]
    assert rows(conn, "SELECT * FROM dml_e.t ORDER BY id") == expected
    assert _pyiceberg_rows(reader_catalog, "dml_e.t", "id") == expected
    assert len(untouched & _files(reader_catalog, "dml_e.t")) == 1  # the file of id 4 was never rewritten
    # Without WHERE: every row.
    assert update(conn, "UPDATE dml_e.t SET amount = 0") == 4
    assert scalar(conn, "SELECT sum(amount) FROM dml_e.t") == 0


def test_truncate(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_f")
    update(conn, "INSERT INTO dml_f.t VALUES (1, 'a', 1), (2, 'b', 2)")
    update(conn, "INSERT INTO dml_f.t VALUES (3, 'c', 3)")
    head = log_head(reader_catalog)
    assert update(conn, "TRUNCATE dml_f.t") == 3
    assert [r.operation for r in log_records(reader_catalog, head)] == ["delete"]
    assert scalar(conn, "SELECT count(*) FROM dml_f.t") == 0
    assert reader_catalog.load_table("dml_f.t").scan().to_arrow().num_rows == 0
    assert update(conn, "TRUNCATE TABLE dml_f.t") == 0


@ON_BOTH_STORAGES
def test_failing_dml_commits_nothing(conn: Any, reader_catalog: Any) -> None:
    _make(conn, "dml_g")
    update(conn, "INSERT INTO dml_g.t VALUES (1, 'a', 1), (2, 'b', 2)")
    head = log_head(reader_catalog)
    snapshot = reader_catalog.load_table("dml_g.t").metadata.current_snapshot_id
    for bad, pattern in [
        ("INSERT INTO dml_g.t VALUES (3, 'c')", "INVALID_ARGUMENT.*INSERT INTO dml_g.t.*3 columns but 2"),
        ("INSERT INTO dml_g.t (name) VALUES ('x')", "INVALID_ARGUMENT.*column id is NOT NULL"),
        ("INSERT INTO dml_g.t VALUES (NULL, 'x', 1)", "INVALID_ARGUMENT.*NULL in column id"),
        ("INSERT INTO dml_g.t VALUES ('abc', 'x', 1)", "INVALID_ARGUMENT.*Could not convert"),
        ("INSERT INTO dml_g.t BY NAME SELECT 1 AS nope", "INVALID_ARGUMENT.*no column nope"),
        ("INSERT INTO dml_g.nope VALUES (1)", "NOT_FOUND.*dml_g.nope does not exist"),
        ("UPDATE dml_g.t SET id = NULL WHERE id = 1", "INVALID_ARGUMENT.*NULL in column id"),
        ("UPDATE dml_g.t SET nope = 1", "NOT_FOUND.*no column nope"),
        ("UPDATE dml_g.t SET amount = 'x' WHERE id = 2", "INVALID_ARGUMENT"),
        ("DELETE FROM dml_g.t WHERE nope = 1", "nope"),
        ("DELETE FROM dml_g.t WHERE id = 1 / 0 + 'x'", "INVALID_ARGUMENT"),
        ("UPDATE dml_g.t SET amount = 99999999999 WHERE id = 1", "INVALID_ARGUMENT"),
        ("DELETE FROM other.t WHERE true", "NOT_FOUND.*other.t does not exist"),
        ("INSERT INTO dml_g.t VALUES (1, 2", "INVALID_ARGUMENT.*syntax error"),
    ]:
        with pytest.raises(adbc_driver_manager.Error, match=pattern) as info:
            update(conn, bad)
        assert "Traceback" not in str(info.value) and ".py" not in str(info.value), str(info.value)
    assert log_head(reader_catalog) == head
    assert reader_catalog.load_table("dml_g.t").metadata.current_snapshot_id == snapshot
    assert rows(conn, "SELECT id, name FROM dml_g.t ORDER BY id") == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def test_asking_for_the_schema_of_a_write_does_not_run_it(
    conn: Any, reader_catalog: Any, write_server: ServerProcess
) -> None:
    from flight_server.flightsql import protocol

    _make(conn, "dml_h")
    head = log_head(reader_catalog)
    command = protocol.CommandStatementQuery(query="INSERT INTO dml_h.t VALUES (1, 'a', 1)").pack()
    client = flight.FlightClient(write_server.location)
    try:
        schema = client.get_schema(flight.FlightDescriptor.for_command(command)).schema
    finally:
        client.close()
    assert schema.names == ["count"]
    assert log_head(reader_catalog) == head
    assert scalar(conn, "SELECT count(*) FROM dml_h.t") == 0


def test_engine_errors_name_the_statement_not_the_internal_query(conn: Any) -> None:
    _make(conn, "dml_i")
    update(conn, "INSERT INTO dml_i.t VALUES (1, 'a', 1)")
    for bad, prefix in [("DELETE FROM dml_i.t WHERE nope = 1", "DELETE FROM dml_i.t: "),
                        ("UPDATE dml_i.t SET amount = 1 WHERE nope", "UPDATE dml_i.t: "),
                        ("INSERT INTO dml_i.t SELECT nope, 'x', 1", "INSERT INTO dml_i.t: ")]:
        with pytest.raises(adbc_driver_manager.Error) as info:
            update(conn, bad)
        message = str(info.value)
        assert prefix in message and "nope" in message, message
        assert "__icefloe" not in message and "LINE 1" not in message, message


def test_failing_inserts_leave_no_query_behind(conn: Any, write_server: ServerProcess) -> None:
    """A query that failed mid-stream must be released at once: left registered, the query
    watchdog would later ask the finished RPC's context about cancellation (a crash)."""
    _make(conn, "dml_j")
    for i in range(15):
        with pytest.raises(adbc_driver_manager.Error, match="Could not convert"):
            update(conn, f"INSERT INTO dml_j.t SELECT CASE WHEN r < 200000 THEN CAST(r AS VARCHAR) ELSE 'x{i}' END, "
                         "'n', 1 FROM (SELECT range AS r FROM range(300000))")
        time.sleep(0.12)  # longer than the watchdog's period
    assert write_server.proc is not None and write_server.proc.poll() is None
    assert scalar(conn, "SELECT count(*) FROM dml_j.t") == 0


def test_write_sent_as_a_plain_query_runs_at_get_flight_info(
    conn: Any, reader_catalog: Any, write_server: ServerProcess
) -> None:
    """CommandStatementQuery (what plain Flight SQL clients send for any SQL): the write runs at
    GetFlightInfo, total_records is its row count and DoGet reads one ``count`` row."""
    from flight_server.flightsql import protocol

    _make(conn, "dml_k")
    head = log_head(reader_catalog)
    command = protocol.CommandStatementQuery(query="INSERT INTO dml_k.t VALUES (1, 'a', 1), (2, 'b', 2)").pack()
    client = flight.FlightClient(write_server.location)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
        assert log_head(reader_catalog) == head + 1  # committed before any DoGet
        assert info.total_records == 2
        assert client.do_get(info.endpoints[0].ticket).read_all().to_pylist() == [{"count": 2}]
    finally:
        client.close()
    assert log_head(reader_catalog) == head + 1  # reading the result does not run it again
    assert scalar(conn, "SELECT count(*) FROM dml_k.t") == 2
