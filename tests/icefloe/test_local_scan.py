"""In-process scans read dictionary-coded string columns as dictionaries, and only those, and
stream exactly the table's types and values either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import icefloe
from icefloe.local_scan import FooterCache
from icefloe.views import dictionary_to_view

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


def _three_appends(tmp_path: Path, s: Callable[[int], str], b: Callable[[int], bytes | None]
                   ) -> tuple[icefloe.Lake, icefloe.Table]:
    """ns.t (id, s, b, u) from three appends of 1,000 rows: s (null every 13th row) and b
    few-valued, so dictionary-coded; u unique, so plain."""
    lake = icefloe.open(tmp_path / "warehouse")
    lake.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("u", pa.string())])
    t = lake.create_table("ns.t", schema=schema)
    for part in range(3):
        ids = list(range(part * 1000, (part + 1) * 1000))
        t.append(pa.table({"id": ids, "s": [None if i % 13 == 0 else s(i) for i in ids], "b": [b(i) for i in ids],
                           "u": [f"unique-{i}" for i in ids]}, schema=schema))
    return lake, t


def test_dictionary_reads_stream_the_tables_types_and_values(tmp_path: Path) -> None:
    lake, t = _three_appends(tmp_path, lambda i: f"k{i % 5}", lambda i: f"b{i % 3}".encode())
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


def test_the_pycapsule_export_sends_dictionary_coded_strings_as_views(tmp_path: Path) -> None:
    """polars rebuilt every plain string it was handed (half of a 10M-row scan's time,
    bench_embedded): the stream export now gathers dictionary-coded columns into views."""
    lake, t = _three_appends(tmp_path, lambda i: f"long value number {i % 5}",
                             lambda i: None if i % 7 == 0 else f"b{i % 3}".encode())
    scan = t.scan()
    exported = pa.RecordBatchReader.from_stream(scan)
    # Only the dictionary-coded columns change type; the unique one stays plain.
    assert [f.type for f in exported.schema] == [pa.int64(), pa.string_view(), pa.binary_view(), pa.string()]
    got = exported.read_all()
    got.validate(full=True)
    assert got.cast(scan.schema).sort_by("id").equals(scan.to_table().sort_by("id"))
    assert got.column("s").null_count == sum(1 for i in range(3000) if i % 13 == 0)
    # polars and DuckDB see the table's own logical types and values.
    frame = pl.DataFrame(scan)
    assert frame.schema == pl.Schema({"id": pl.Int64, "s": pl.String, "b": pl.Binary, "u": pl.String})
    assert frame.sort("id")["s"].to_list()[:3] == [None, "long value number 1", "long value number 2"]
    assert duckdb.sql("SELECT count(s), count(DISTINCT s), max(b) FROM scan").fetchall() == [(2769, 5, b"b2")]
    # A consumer that asks for a schema gets it; schema / to_reader keep the plain types.
    asked = pa.RecordBatchReader.from_stream(scan, schema=scan.schema)
    assert asked.schema == scan.schema and scan.to_reader().schema == scan.schema
    # Filtered scans (DuckDB) and projections keep working through the export.
    assert pa.table(t.scan(columns=["s"], filter="s = 'long value number 2'")).num_rows == \
        sum(1 for i in range(3000) if i % 13 and i % 5 == 2)
    assert pa.table(t.scan(columns=["u", "s"])).schema.types == [pa.string(), pa.string_view()]
    lake.close()


def test_views_from_dictionaries_keep_every_value_and_null() -> None:
    cases = [
        pa.array(["a", None, "longer than twelve bytes", "a", "b"]).dictionary_encode(),
        pa.array(["x"] * 3).dictionary_encode().slice(1),
        pa.array([None, None], pa.string()).dictionary_encode(),
        pa.array([], pa.string()).dictionary_encode(),
        pa.array([b"\x00\xff", None, b"q" * 40], pa.binary()).dictionary_encode(),
        pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 1], pa.int32()), pa.array(["u", None])),
        pa.array(["k", "l", None, "m"] * 5, pa.large_string()).dictionary_encode().slice(3, 9),
    ]
    for column in cases:
        views = dictionary_to_view(column)
        views.validate(full=True)
        assert views.type in (pa.string_view(), pa.binary_view())
        assert views.to_pylist() == column.to_pylist() and views.null_count == column.to_pylist().count(None)
