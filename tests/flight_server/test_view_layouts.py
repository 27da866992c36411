"""Every Arrow string / binary / list layout loads, stores and queries right, on every append
path and every read path (issue 45).

Columns typed ``string_view`` / ``binary_view`` (as ``tpchgen-cli`` 4 and polars write them)
loaded without complaint, after which any filter DuckDB pushed into the table's Arrow dataset
failed: ``Function 'equal' has no kernel matching input types (string, string_view)``. Appends
now store plain layouts; data files that already hold view layouts (older icefloe, other
writers, here added through the REST catalog) are still read right.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from adbc_driver_flightsql import dbapi as flightsql
from cli_runner import icefloe
from doput_client import do_put
from pyiceberg.catalog.rest import RestCatalog
from servers import ServerProcess

import icefloe as icefloe_api
from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url

# (no null here: with a null in the column, DuckDB happened not to push the failing filter)
NAMES = ["GERMANY", "FRANCE", "GERMANY", "CHILE", "PERU"]


def every_layout() -> pa.Table:
    """One column per string / binary layout, plus list views and a dictionary column."""
    return pa.table({
        "k": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "sv": pa.array(NAMES, pa.string_view()),
        "bv": pa.array([b"x", b"y", b"x", None, b"z"], pa.binary_view()),
        "ls": pa.array(NAMES, pa.large_string()),
        "lb": pa.array([b"x", b"y", b"x", None, b"z"], pa.large_binary()),
        "s": pa.array(NAMES, pa.string()),
        "d": pa.array(NAMES, pa.string()).dictionary_encode(),
        "tags": pa.array([["a"], ["b", "c"], [], None, ["a"]], pa.list_view(pa.string_view())),
    })


# (query, expected rows as sorted tuples): filters, joins and group-bys on every layout.
QUERIES: list[tuple[str, list[tuple[Any, ...]]]] = [
    ("SELECT k FROM {t} WHERE sv || '' = 'GERMANY'", [(1,), (3,)]),
    ("SELECT k FROM {t} WHERE sv = 'GERMANY'", [(1,), (3,)]),
    ("SELECT k FROM {t} WHERE sv > 'G' AND sv < 'Q'", [(1,), (3,), (5,)]),
    ("SELECT k FROM {t} WHERE bv = 'x'::BLOB", [(1,), (3,)]),
    ("SELECT k FROM {t} WHERE lb = 'z'::BLOB", [(5,)]),
    ("SELECT k FROM {t} WHERE ls IN ('FRANCE', 'PERU')", [(2,), (5,)]),
    ("SELECT k FROM {t} WHERE d = 'FRANCE'", [(2,)]),
    ("SELECT k FROM {t} WHERE bv IS NULL", [(4,)]),
    ("SELECT k FROM {t} WHERE list_contains(tags, 'a')", [(1,), (5,)]),
    ("SELECT sv, count(*) FROM {t} GROUP BY sv", [("CHILE", 1), ("FRANCE", 1), ("GERMANY", 2), ("PERU", 1)]),
    ("SELECT bv, count(*) FROM {t} WHERE bv IS NOT NULL GROUP BY bv", [(b"x", 2), (b"y", 1), (b"z", 1)]),
    ("SELECT a.k, b.k FROM {t} a JOIN {t} b ON a.sv = b.ls WHERE a.k < b.k", [(1, 3)]),
    ("SELECT a.k FROM {t} a JOIN {t} b ON a.bv = b.lb AND a.d = b.s WHERE b.k = 2", [(2,)]),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("views") / "warehouse") as proc:
        yield proc


def _sql(server: ServerProcess, statement: str) -> list[tuple[Any, ...]]:
    with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)
        return [tuple(row) for row in cur.fetchall()]


def _check_queries(server: ServerProcess, table: str) -> None:
    for query, expected in QUERIES:
        got = _sql(server, query.format(t=table))
        assert sorted(got, key=repr) == sorted(expected, key=repr), query


def _data_file_types(server: ServerProcess, namespace: str, table: str) -> set[pa.DataType]:
    files = sorted((server.warehouse / namespace / table / "data").rglob("*.parquet"))
    assert files
    return {f.type for path in files for f in pq.read_schema(path)}


def _has_view(types: set[pa.DataType]) -> bool:
    text = " ".join(str(t) for t in types)
    return "_view" in text


def _append_doput(server: ServerProcess, ns: str, data: pa.Table, tmp: Path) -> None:
    do_put(server.location, (ns, "t"), data)


def _append_staged(server: ServerProcess, ns: str, data: pa.Table, tmp: Path) -> None:
    token = do_put(server.location, (ns, "t"), data, stage="job")["token"]
    client = flight.FlightClient(server.location)
    try:
        body = json.dumps({"table": f"{ns}.t", "tokens": [token], "idempotency_key": f"{ns}-k"}).encode()
        list(client.do_action(flight.Action("icefloe.commit-staged", body)))
    finally:
        client.close()


def _append_adbc_ingest(server: ServerProcess, ns: str, data: pa.Table, tmp: Path) -> None:
    with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.adbc_ingest("t", data, mode="append", db_schema_name=ns)


def _append_load_cli(server: ServerProcess, ns: str, data: pa.Table, tmp: Path) -> None:
    path = tmp / "views.parquet"
    pq.write_table(data, path)
    assert _has_view({f.type for f in pq.read_schema(path)})  # the file itself holds view layouts
    result = icefloe("load", "--uri", server.location, str(path), f"{ns}.t")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("append", [_append_doput, _append_staged, _append_adbc_ingest, _append_load_cli],
                         ids=["doput", "staged", "adbc_ingest", "load_cli"])
def test_view_layouts_append_as_plain_files_and_query(server: ServerProcess, tmp_path: Path, append: Any) -> None:
    ns = "v_" + append.__name__.removeprefix("_append_")
    _sql(server, f"CREATE SCHEMA {ns}")
    _sql(server, f"CREATE TABLE {ns}.t (k BIGINT, sv VARCHAR, bv BLOB, ls VARCHAR, lb BLOB, s VARCHAR, d VARCHAR, "
                 "tags VARCHAR[])")
    append(server, ns, every_layout(), tmp_path)
    assert not _has_view(_data_file_types(server, ns, "t"))
    _check_queries(server, f"{ns}.t")
    # a SQL write reading those rows back stores plain layouts as well
    _sql(server, f"INSERT INTO {ns}.t SELECT k + 10, sv, bv, ls, lb, s, d, tags FROM {ns}.t")
    assert _sql(server, f"SELECT count(*) FROM {ns}.t WHERE sv = 'GERMANY'") == [(4,)]


def test_a_table_partitioned_by_a_view_typed_column(server: ServerProcess) -> None:
    _sql(server, "CREATE SCHEMA v_part")
    _sql(server, "CREATE TABLE v_part.t (k BIGINT, sv VARCHAR, bv BLOB, ls VARCHAR, lb BLOB, s VARCHAR, d VARCHAR, "
                 "tags VARCHAR[]) PARTITIONED BY (sv, bucket(2, k))")
    do_put(server.location, ("v_part", "t"), every_layout())
    assert not _has_view(_data_file_types(server, "v_part", "t"))
    assert len(list((server.warehouse / "v_part" / "t" / "data").rglob("*.parquet"))) >= 4  # laid out by sv
    _check_queries(server, "v_part.t")


def test_a_new_table_from_view_layouts(server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "fresh.parquet"
    pq.write_table(every_layout(), path)
    result = icefloe("load", "--uri", server.location, str(path), "v_new.t", "--create")
    assert result.returncode == 0, result.stderr
    assert not _has_view(_data_file_types(server, "v_new", "t"))
    _check_queries(server, "v_new.t")


def test_data_files_that_hold_view_layouts_read_right_on_every_path(server: ServerProcess) -> None:
    """A file written by another tool with view layouts, added through the REST catalog."""
    rest = RestCatalog("icefloe", uri=rest_url(server))
    rest.create_namespace("v_legacy")
    plain = pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
                       for f in every_layout().schema])
    plain = pa.schema([f.with_type({pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(f.type, f.type))
                       for f in plain]).set(7, pa.field("tags", pa.list_(pa.string())))
    table = rest.create_table("v_legacy.t", plain)
    legacy = Path(table.location().removeprefix("file://")) / "data" / "legacy.parquet"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(every_layout().drop_columns(["tags"]).append_column(
        "tags", pa.array([["a"], ["b", "c"], [], None, ["a"]], pa.list_(pa.string()))), legacy)
    assert _has_view({f.type for f in pq.read_schema(legacy)})
    table.add_files([str(legacy)])
    _check_queries(server, "v_legacy.t")  # Arrow dataset scans, native scans, plain scans

    # a change scan of the add
    client = flight.FlightClient(server.location)
    try:
        command = json.dumps({"changes": "v_legacy.t", "after": 0, "until": head_seq(server.warehouse),
                              "include": "appends"}).encode()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
        rows = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
    finally:
        client.close()
    assert sorted(rows.column("sv").to_pylist(), key=repr) == sorted(NAMES, key=repr)

    # the rows.v1 feed of the add
    with FeedReader(server.location, {"feed": "rows.v1", "after": 0, "tables": ["v_legacy.t"]}) as feed:
        got: list[dict[str, Any]] = []
        while len(got) < len(NAMES):
            message = feed.next(timeout=30)
            if message.batch is not None:
                got.extend(message.batch.to_pylist())
    assert sorted((r["k"], r["sv"], r["bv"]) for r in got) == sorted(
        zip(range(1, 6), NAMES, [b"x", b"y", b"x", None, b"z"], strict=True))

    # an in-process reader of the same warehouse, with a filter
    with icefloe_api.open(str(server.warehouse), read_only=True) as lake:
        scanned = pa.table(lake.table("v_legacy.t").scan(columns=["k"], filter="sv = 'GERMANY' AND bv = 'x'"))
    assert sorted(scanned.column("k").to_pylist()) == [1, 3]

    # SQL DELETE / UPDATE filter the same files (each file its own dataset)
    _sql(server, "DELETE FROM v_legacy.t WHERE sv = 'FRANCE'")
    _sql(server, "UPDATE v_legacy.t SET k = k + 100 WHERE bv = 'z'::BLOB")
    assert sorted(_sql(server, "SELECT k FROM v_legacy.t WHERE sv <> 'CHILE'")) == [(1,), (3,), (105,)]


def test_doput_into_a_bucket_partitioned_table(server: ServerProcess) -> None:
    """Flight hands the server batches whose buffers point into the gRPC message, not always
    8-aligned; pyiceberg-core's bucket transform panicked on them (INTERNAL for any DoPut into a
    bucket-partitioned table, whatever the layouts)."""
    _sql(server, "CREATE SCHEMA v_bucket")
    _sql(server, "CREATE TABLE v_bucket.t (k BIGINT, s VARCHAR) PARTITIONED BY (bucket(2, k))")
    for start in (0, 3, 10):
        data = pa.table({"k": pa.array(range(start, start + 3 + start % 2), pa.int64()),
                         "s": pa.array([f"r{i}" for i in range(start, start + 3 + start % 2)])})
        assert do_put(server.location, ("v_bucket", "t"), data)["rows"] == data.num_rows
    assert _sql(server, "SELECT count(*), sum(k) FROM v_bucket.t") == [(10, 0 + 1 + 2 + 3 + 4 + 5 + 6 + 10 + 11 + 12)]
