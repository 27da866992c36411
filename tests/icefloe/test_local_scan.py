"""In-process scans read dictionary-coded string columns as dictionaries, and only those, and
stream exactly the table's types and values either way."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import icefloe
from icefloe.local_scan import FooterCache

ROWS = 200_000


def _coded(path: Path, table: pa.Table, **options: object) -> frozenset[str]:
    pq.write_table(table, path, **options)  # type: ignore[arg-type]
    return FooterCache().dictionary_coded(str(path), pafs.LocalFileSystem())


def test_footer_picks_only_dictionary_coded_string_columns(tmp_path: Path) -> None:
    few = pa.array([f"r{i % 100}" for i in range(ROWS)])
    unique = pa.array([f"user-{i}" for i in range(ROWS)])  # past the dictionary limit: plain pages
    mostly_null = pa.array([None if i % 10 else f"n{i % 7}" for i in range(ROWS)])
    table = pa.table({"few": few, "unique": unique, "blob": few.cast(pa.binary()), "id": pa.array(range(ROWS)),
                      "mostly_null": mostly_null})
    assert _coded(tmp_path / "a.parquet", table, dictionary_pagesize_limit=64 * 1024) == {"few", "blob", "mostly_null"}
    # Dictionary encoding off, or a delta encoding: nothing is read as a dictionary.
    assert _coded(tmp_path / "b.parquet", table, use_dictionary=False) == frozenset()
    delta = pa.table({"few": few})
    assert _coded(tmp_path / "c.parquet", delta, use_dictionary=False,
                  column_encoding={"few": "DELTA_BYTE_ARRAY"}) == frozenset()


def test_dictionary_reads_stream_the_tables_types_and_values(tmp_path: Path) -> None:
    lake = icefloe.open(tmp_path / "warehouse")
    lake.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("u", pa.string())])
    t = lake.create_table("ns.t", schema=schema)
    for part in range(3):
        ids = list(range(part * 1000, (part + 1) * 1000))
        t.append(pa.table({"id": ids, "s": [None if i % 13 == 0 else f"k{i % 5}" for i in ids],
                           "b": [f"b{i % 3}".encode() for i in ids], "u": [f"unique-{i}" for i in ids]},
                          schema=schema))
    scan = t.scan()
    data_files = [task.file.file_path for task in lake.backend.catalog.load_table(("ns", "t")).scan().plan_files()]
    coded = FooterCache().dictionary_coded(data_files[0].removeprefix("file://"), pafs.LocalFileSystem())
    assert {"s", "b"} <= coded  # so the scan below really takes the dictionary path for them
    got = scan.to_table()
    assert got.schema == scan.schema
    assert [f.type for f in got.schema] == [pa.int64(), pa.string(), pa.binary(), pa.string()]
    rows = sorted(got.to_pylist(), key=lambda r: r["id"])
    assert rows[:2] == [{"id": 0, "s": None, "b": b"b0", "u": "unique-0"},
                        {"id": 1, "s": "k1", "b": b"b1", "u": "unique-1"}]
    assert len(rows) == 3000 and rows[-1] == {"id": 2999, "s": "k4", "b": b"b2", "u": "unique-2999"}
    # The filtered (DuckDB) path reads the same datasets.
    assert t.scan(columns=["s"], filter="s = 'k2'").to_table().num_rows == \
        sum(1 for r in rows if r["s"] == "k2")
    lake.close()
