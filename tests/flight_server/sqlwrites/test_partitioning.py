"""PARTITIONED BY (identity, day, bucket, ...): every SQL write lays files out by the spec."""

from __future__ import annotations

import json
from typing import Any

import adbc_driver_manager
import pytest
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, MonthTransform
from sqlwrites_lib import log_head, rows, update


def test_partitioned_table_writes_follow_the_spec(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA part_a")
    update(conn, "CREATE TABLE part_a.t (id BIGINT, ts TIMESTAMP, c VARCHAR) "
                 "PARTITIONED BY (c, day(ts), bucket(4, id))")
    spec = reader_catalog.load_table("part_a.t").spec()
    assert [(f.name, type(f.transform)) for f in spec.fields] == [
        ("c", IdentityTransform), ("ts_day", DayTransform), ("id_bucket", BucketTransform)]
    update(conn, """INSERT INTO part_a.t VALUES (1, TIMESTAMP '2024-01-01 10:00', 'a'),
        (2, TIMESTAMP '2024-01-02 10:00', 'a'), (3, TIMESTAMP '2024-01-01 11:00', 'b')""")
    update(conn, "UPDATE part_a.t SET c = 'z' WHERE id = 3")  # moves the row to another partition
    update(conn, "DELETE FROM part_a.t WHERE id = 1")
    files = rows(conn, 'SELECT path, record_count, partition FROM part_a."t$files" ORDER BY path')
    partitions = sorted((json.loads(f["partition"]) for f in files), key=lambda p: p["c"])
    assert [(p["c"], p["ts_day"]) for p in partitions] == [("a", "2024-01-02"), ("z", "2024-01-01")]
    assert all("c=" + p["c"] in f["path"] for f, p in zip(sorted(files, key=lambda f: json.loads(f["partition"])["c"]),
                                                          partitions, strict=True))
    assert rows(conn, "SELECT id, c FROM part_a.t ORDER BY id") == [{"id": 2, "c": "a"}, {"id": 3, "c": "z"}]
    # pyiceberg prunes by partition and sees the same rows.
    scanned = reader_catalog.load_table("part_a.t").scan(row_filter="c == 'z'").to_arrow()
    assert scanned.column("id").to_pylist() == [3]


def test_ctas_partitioned_and_bad_specs(conn: Any, reader_catalog: Any) -> None:
    update(conn, "CREATE SCHEMA part_b")
    update(conn, """CREATE TABLE part_b.src AS
                    SELECT range AS id, TIMESTAMP '2024-01-15' + to_days(CAST(range AS INT) * 20) AS ts
                    FROM range(6)""")
    assert update(conn, "CREATE TABLE part_b.m PARTITIONED BY (month(ts)) AS SELECT * FROM part_b.src") == 6
    table = reader_catalog.load_table("part_b.m")
    assert [type(f.transform) for f in table.spec().fields] == [MonthTransform]
    months = {json.loads(r["partition"])["ts_month"] for r in rows(conn, 'SELECT partition FROM part_b."m$files"')}
    assert months == {"2024-01", "2024-02", "2024-03", "2024-04"}  # Jan 15 + 0, 20, ..., 100 days
    head = log_head(reader_catalog)
    for bad, pattern in [
        ("CREATE TABLE part_b.x (a INT) PARTITIONED BY (nope)", "no column nope"),
        ("CREATE TABLE part_b.x (a INT) PARTITIONED BY (day(a))", "day cannot be applied to a"),
        ("CREATE TABLE part_b.x (a INT) PARTITIONED BY (bucket(0, a))", "positive integer"),
    ]:
        with pytest.raises(adbc_driver_manager.Error, match=f"INVALID_ARGUMENT.*{pattern}"):
            update(conn, bad)
    assert log_head(reader_catalog) == head and not reader_catalog.table_exists("part_b.x")


def test_doput_appends_honour_a_sql_created_spec(conn: Any, write_server: Any) -> None:
    import pyarrow as pa
    import pyarrow.flight as flight

    update(conn, "CREATE SCHEMA part_c")
    update(conn, "CREATE TABLE part_c.t (id BIGINT, c VARCHAR) PARTITIONED BY (c)")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "c": ["x", "y", "x"]})
    client = flight.FlightClient(write_server.location)
    try:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("part_c", "t"), data.schema)
        writer.write_table(data)
        writer.done_writing()
        reader.read()
        writer.close()
    finally:
        client.close()
    files = rows(conn, 'SELECT record_count, partition FROM part_c."t$files"')
    assert sorted((json.loads(f["partition"])["c"], f["record_count"]) for f in files) == [("x", 2), ("y", 1)]
