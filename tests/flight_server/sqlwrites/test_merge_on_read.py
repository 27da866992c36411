"""Merge-on-read SQL DELETE / UPDATE over ADBC: position delete files, a row-delta snapshot,
true counts, change scans, time travel, pyiceberg's view, bad modes refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as fsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from servers import ServerProcess
from sqlwrites_lib import ON_BOTH_STORAGES, log_head, log_records, rows, scalar, update

from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url

MOR = "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read'"


def _make(conn: Any, ns: str, partitioned: bool) -> str:
    update(conn, f"CREATE SCHEMA {ns}")
    update(conn, f"CREATE TABLE {ns}.t (id BIGINT NOT NULL, p INTEGER, name VARCHAR)"
                 + (" PARTITIONED BY (p)" if partitioned else ""))
    update(conn, f"ALTER TABLE {ns}.t SET ({MOR})")
    # Two appends: two data files per partition.
    update(conn, f"INSERT INTO {ns}.t SELECT i, CAST(i % 3 AS INTEGER), CAST(i AS VARCHAR) FROM range(0, 500) r(i)")
    update(conn, f"INSERT INTO {ns}.t SELECT i, CAST(i % 3 AS INTEGER), CAST(i AS VARCHAR) FROM range(500, 1000) r(i)")
    return f"{ns}.t"


def _changes(server: ServerProcess, table: str, after: int, until: int) -> list[dict[str, Any]]:
    client = flight.FlightClient(server.location)
    try:
        request = {"changes": table, "after": after, "until": until, "include": "all"}
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        out: list[dict[str, Any]] = []
        for endpoint in info.endpoints:
            out.extend(client.do_get(endpoint.ticket).read_all().to_pylist())
        return out
    finally:
        client.close()


def _snapshot_files(reader_catalog: Any, name: str) -> tuple[Any, list[Any], list[Any]]:
    table = reader_catalog.load_table(name)
    snap = table.current_snapshot()
    data, deletes = [], []
    for manifest in snap.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io):
            (deletes if manifest.content.value == 1 else data).append((entry, manifest))
    return snap, data, deletes


@ON_BOTH_STORAGES
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_merge_on_read_delete_and_update(conn: Any, reader_catalog: Any, write_server: ServerProcess,
                                         partitioned: bool) -> None:
    name = _make(conn, f"mor_{'p' if partitioned else 'u'}", partitioned)
    _, data_before, _ = _snapshot_files(reader_catalog, name)
    head = log_head(reader_catalog)
    before_id = reader_catalog.load_table(name).current_snapshot().snapshot_id

    assert update(conn, f"DELETE FROM {name} WHERE id < 100 OR id % 50 = 7") == 118
    deleted_seq = log_head(reader_catalog)
    snap, data, deletes = _snapshot_files(reader_catalog, name)
    # No data file was rewritten: the same data files, plus position delete files.
    assert sorted(e.data_file.file_path for e, _ in data) == sorted(e.data_file.file_path for e, _ in data_before)
    assert snap.summary.operation.value == "delete"
    assert snap.summary["added-position-deletes"] == "118"
    assert snap.summary["added-delete-files"] == str(len(deletes))
    assert snap.summary["total-records"] == "1000" and snap.summary["total-position-deletes"] == "118"
    # File-scoped (write.delete.granularity = file, the default): one delete file per data file
    # that lost rows (all of them: two per partition), each naming only its own data file.
    assert len(deletes) == len(data) == (6 if partitioned else 2)
    for entry, manifest in deletes:
        assert entry.data_file.content.value == 1 and entry.sequence_number == snap.sequence_number
        assert manifest.sequence_number == snap.sequence_number
        with reader_catalog.load_table(name).io.new_input(entry.data_file.file_path).open() as stream:
            raw = stream.read()
        written = pq.read_table(pa.BufferReader(raw))
        assert written.schema.names == ["file_path", "pos"]
        assert [f.metadata[b"PARQUET:field_id"] for f in written.schema] == [b"2147483546", b"2147483545"]
        # The spec's types (a required string and long), whatever the writer handed Parquet.
        assert [(f.type, f.nullable) for f in written.schema] == [(pa.string(), False), (pa.int64(), False)]
        footer = pq.ParquetFile(pa.BufferReader(raw))
        assert [str(footer.schema.column(i).logical_type) for i in range(2)] == ["String", "None"]
        assert "RLE_DICTIONARY" in footer.metadata.row_group(0).column(0).encodings  # one entry per data file
        assert "DELTA_BINARY_PACKED" in footer.metadata.row_group(0).column(1).encodings  # sorted positions
        pairs = list(zip(written.column(0).to_pylist(), written.column(1).to_pylist(), strict=True))
        assert pairs == sorted(pairs) and len(set(pairs)) == len(pairs)
        assert len({path for path, _ in pairs}) == 1
        bounds = entry.data_file.lower_bounds[2147483546], entry.data_file.upper_bounds[2147483546]
        assert bounds == (pairs[0][0].encode(), pairs[0][0].encode())
    if partitioned:
        assert {tuple(e.data_file.partition) for e, _ in deletes} == {(0,), (1,), (2,)}

    gone = set(range(100)) | {i for i in range(1000) if i % 50 == 7}
    expected = [i for i in range(1000) if i not in gone]
    assert [r["id"] for r in rows(conn, f"SELECT id FROM {name} ORDER BY id")] == expected
    assert sorted(reader_catalog.load_table(name).scan().to_arrow().column("id").to_pylist()) == expected
    [record] = log_records(reader_catalog, head)
    assert (record.operation, record.added_rows, record.deleted_rows) == ("delete", 0, 118)
    changes = _changes(write_server, name, head, deleted_seq)
    assert sorted(r["id"] for r in changes if r["_operation"] == "delete") == sorted(gone)
    assert not [r for r in changes if r["_operation"] != "delete"]
    # Deleting rows already deleted deletes nothing (and commits nothing).
    assert update(conn, f"DELETE FROM {name} WHERE id < 50") == 0
    assert log_head(reader_catalog) == deleted_seq

    assert update(conn, f"UPDATE {name} SET name = 'u' || name, p = p WHERE id % 10 = 1") == 90
    updated_seq = log_head(reader_catalog)
    snap, data, deletes = _snapshot_files(reader_catalog, name)
    assert snap.summary.operation.value == "overwrite"
    assert snap.summary["added-position-deletes"] == "90" and snap.summary["added-records"] == "90"
    [record] = log_records(reader_catalog, deleted_seq)
    assert (record.operation, record.added_rows, record.deleted_rows) == ("overwrite", 90, 90)
    got = rows(conn, f"SELECT id, name FROM {name} WHERE id % 10 = 1 ORDER BY id")
    assert got == [{"id": i, "name": f"u{i}"} for i in expected if i % 10 == 1]
    assert scalar(conn, f"SELECT count(*) FROM {name}") == len(expected)
    changes = _changes(write_server, name, deleted_seq, updated_seq)
    assert sorted(r["id"] for r in changes if r["_operation"] == "delete") == [i for i in expected if i % 10 == 1]
    assert {r["name"] for r in changes if r["_operation"] == "insert"} == {f"u{i}" for i in expected if i % 10 == 1}
    assert sorted(r["id"] for r in reader_catalog.load_table(name).scan().to_arrow().to_pylist()) == expected

    # Time travel: before the DELETE every row is there; at the DELETE, not yet the UPDATE.
    table = reader_catalog.load_table(name)
    delete_id = table.snapshots()[-2].snapshot_id
    assert scalar(conn, f"SELECT count(*) FROM {name} AT (VERSION => {before_id})") == 1000
    assert scalar(conn, f"SELECT count(*) FROM {name} AT (VERSION => {delete_id}) WHERE name LIKE 'u%'") == 0
    assert scalar(conn, f"SELECT count(*) FROM {name} AT (VERSION => {delete_id})") == len(expected)


def test_partition_granularity_writes_one_delete_file_per_partition(conn: Any, reader_catalog: Any) -> None:
    """``write.delete.granularity`` = ``partition`` (Iceberg's property, any case): one delete
    file for the data files of a partition; scans apply it to each file it names."""
    name = _make(conn, "mor_gran", partitioned=True)
    update(conn, f"ALTER TABLE {name} SET ('write.delete.granularity' = 'Partition')")
    assert update(conn, f"DELETE FROM {name} WHERE id % 7 = 0") == 143
    _, data, deletes = _snapshot_files(reader_catalog, name)
    assert len(data) == 6 and len(deletes) == 3
    assert {tuple(e.data_file.partition) for e, _ in deletes} == {(0,), (1,), (2,)}
    expected = [i for i in range(1000) if i % 7 != 0]
    assert [r["id"] for r in rows(conn, f"SELECT id FROM {name} ORDER BY id")] == expected
    assert sorted(reader_catalog.load_table(name).scan().to_arrow().column("id").to_pylist()) == expected
    # Back to file-scoped: the next DELETE adds one file per data file it touches.
    update(conn, f"ALTER TABLE {name} SET ('write.delete.granularity' = 'file')")
    assert update(conn, f"DELETE FROM {name} WHERE id = 1 OR id = 999") == 2
    _, _, after = _snapshot_files(reader_catalog, name)
    assert len(after) == 5
    assert scalar(conn, f"SELECT count(*) FROM {name}") == len(expected) - 2


def test_unknown_granularity_is_invalid_argument(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA mor_badg")
    update(conn, "CREATE TABLE mor_badg.t (id BIGINT)")
    update(conn, "INSERT INTO mor_badg.t VALUES (1), (2)")
    head = log_head(reader_catalog)
    with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
        update(conn, "ALTER TABLE mor_badg.t SET ('write.delete.granularity' = 'row')")
    assert "INVALID_ARGUMENT" in str(info.value)
    assert "write.delete.granularity is 'row'; expected 'file' or 'partition'" in str(info.value)
    assert log_head(reader_catalog) == head


def test_unknown_mode_is_invalid_argument(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA mor_bad")
    update(conn, "CREATE TABLE mor_bad.t (id BIGINT)")
    update(conn, "INSERT INTO mor_bad.t VALUES (1), (2)")
    head = log_head(reader_catalog)
    with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
        update(conn, "ALTER TABLE mor_bad.t SET ('write.delete.mode' = 'merge-on-write')")
    assert "INVALID_ARGUMENT" in str(info.value)
    assert "write.delete.mode must be 'copy-on-write' or 'merge-on-read', not 'merge-on-write'" in str(info.value)
    assert log_head(reader_catalog) == head
    # Copy-on-write spelled out, in any case, is the default behaviour.
    update(conn, "ALTER TABLE mor_bad.t SET ('write.delete.mode' = 'Copy-On-Write')")
    assert update(conn, "DELETE FROM mor_bad.t WHERE id = 1") == 1
    assert rows(conn, "SELECT id FROM mor_bad.t") == [{"id": 2}]
    # write.merge.mode likewise (MERGE: test_merge_into).
    with pytest.raises(adbc_driver_manager.ProgrammingError) as merge_error:
        update(conn, "ALTER TABLE mor_bad.t SET ('write.merge.mode' = 'mor')")
    assert "write.merge.mode must be 'copy-on-write' or 'merge-on-read', not 'mor'" in str(merge_error.value)


def test_modes_set_by_other_clients_are_checked_at_write_time(tmp_path: Path) -> None:
    """A mode set through the REST catalog (not checked there, as Iceberg's own catalogs do
    not) is refused by the DELETE / UPDATE that would use it: INVALID_ARGUMENT, no commit;
    merge-on-read on a format v1 table likewise."""
    with rest_server(tmp_path / "wh") as server:
        with fsql.connect(server.location, autocommit=True) as c:
            update(c, "CREATE SCHEMA r")
            update(c, "CREATE TABLE r.t (id BIGINT)")
            update(c, "INSERT INTO r.t VALUES (1), (2)")
        rest = RestCatalog("icefloe", uri=rest_url(server))
        table = rest.load_table("r.t")
        table.transaction().set_properties({"write.update.mode": "merge_on_read"}).commit_transaction()
        rest.create_table("r.g", schema=table.schema(), properties={"write.delete.mode": "merge-on-read",
                                                                    "write.delete.granularity": "files"})
        rest.create_table("r.v1", schema=table.schema(), properties={"format-version": "1",
                                                                     "write.delete.mode": "merge-on-read"})
        with fsql.connect(server.location, autocommit=True) as c:
            update(c, "INSERT INTO r.v1 VALUES (1)")
            seq = head_seq(server.warehouse)
            with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
                update(c, "UPDATE r.t SET id = 3 WHERE id = 1")
            assert "INVALID_ARGUMENT" in str(info.value)
            expected = "write.update.mode is 'merge_on_read'; expected 'copy-on-write' or 'merge-on-read'"
            assert expected in str(info.value)
            with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
                update(c, "DELETE FROM r.v1 WHERE id = 1")
            assert "INVALID_ARGUMENT" in str(info.value) and "format v1" in str(info.value)
            update(c, "INSERT INTO r.g VALUES (1)")
            seq = head_seq(server.warehouse)
            with pytest.raises(adbc_driver_manager.ProgrammingError) as info:
                update(c, "DELETE FROM r.g WHERE id = 1")
            assert "INVALID_ARGUMENT" in str(info.value)
            assert "write.delete.granularity is 'files'; expected 'file' or 'partition'" in str(info.value)
            assert head_seq(server.warehouse) == seq
            assert rows(c, "SELECT id FROM r.g") == [{"id": 1}]
            assert rows(c, "SELECT id FROM r.t ORDER BY id") == [{"id": 1}, {"id": 2}]


def test_parameters_aliases_and_other_tables(conn: Any, reader_catalog: Any) -> None:
    name = _make(conn, "mor_q", partitioned=False)
    update(conn, "CREATE TABLE mor_q.ids (id BIGINT)")
    update(conn, "INSERT INTO mor_q.ids VALUES (3), (4), (5)")
    with conn.cursor() as cur:
        cur.execute(f"DELETE FROM {name} WHERE id = ? OR id = ?", [1, 2])
        assert cur.rowcount == 2
    assert update(conn, f"DELETE FROM {name} AS x WHERE x.id < 10 AND x.id IN (SELECT id FROM mor_q.ids)") == 3
    assert update(conn, f"UPDATE {name} AS x SET name = (SELECT 'n' || count(*) FROM mor_q.ids) "
                        "WHERE x.id BETWEEN 6 AND 7") == 2
    assert update(conn, f"UPDATE {name} SET p = 9") == 995  # no WHERE: every visible row
    got = rows(conn, f"SELECT id, p, name FROM {name} WHERE id < 9 ORDER BY id")
    assert got == [{"id": 0, "p": 9, "name": "0"}, {"id": 6, "p": 9, "name": "n3"}, {"id": 7, "p": 9, "name": "n3"},
                   {"id": 8, "p": 9, "name": "8"}]
    assert scalar(conn, f"SELECT count(*) FROM {name}") == 995
    records = log_records(reader_catalog, 0)
    ours = [r for r in records
            if r.namespace == ("mor_q",) and r.table == "t" and r.operation in ("delete", "overwrite")]
    assert [(r.added_rows, r.deleted_rows) for r in ours] == [(0, 2), (0, 3), (2, 2), (995, 995)]
    assert ours[1].extra["inputs"] == ["mor_q.ids"]
