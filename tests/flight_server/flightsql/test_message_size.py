"""No message the server streams exceeds what a gRPC client accepts by default (16 MiB).

Flight sends one record batch as one message; wide rows (1,000 rows of 24 KB strings) used to
leave as one ~24 MB batch, which ADBC's Go Flight SQL driver refuses. Every stream is checked
with a client that keeps gRPC's default receive limit: ADBC for Flight SQL, and a
pyarrow.flight client told to keep 16 MiB (pyarrow itself lifts the limit) for the change
scans and the row feed.
"""

from __future__ import annotations

import json
from pathlib import Path

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from servers import ServerProcess

from flight_server.message_size import MAX_MESSAGE_BYTES, bounded_table, sliced

GRPC_DEFAULT_LIMIT = 16 * 1024 * 1024
DEFAULT_LIMIT_OPTIONS = [("grpc.max_receive_message_length", GRPC_DEFAULT_LIMIT)]
ROWS, WIDTH = 1000, 24_000  # ~24 MB of strings


def _wide(rows: int = ROWS) -> pa.Table:
    strings = [f"{i:08d}" + "x" * WIDTH for i in range(rows)]
    return pa.table({"i": pa.array(range(rows), pa.int64()), "s": pa.array(strings)})


@pytest.fixture
def wide_server(server: ServerProcess) -> ServerProcess:
    with fsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA ns")
        cur.execute("CREATE TABLE ns.wide (i BIGINT, s VARCHAR)")
    server.wide_seq = int(do_put(server.location, ("ns", "wide"), _wide())["commit_seq"])  # type: ignore[attr-defined]
    return server


def _check_rows(table: pa.Table) -> None:
    assert table.num_rows == ROWS
    got = sorted(zip(table["i"].to_pylist(), table["s"].to_pylist(), strict=True))
    assert [i for i, _ in got] == list(range(ROWS))
    assert all(s == f"{i:08d}" + "x" * WIDTH for i, s in got)


def test_adbc_reads_a_wide_query_result(server: ServerProcess) -> None:
    with fsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT i, printf('%08d', i) || repeat('x', {WIDTH}) AS s FROM range({ROWS}) t(i)")
        _check_rows(cur.fetch_arrow_table())


def test_wide_result_is_cut_with_the_query_log_off(tmp_path: Path) -> None:
    """With instrumentation off the query log does not count the stream, and the cut into
    messages must still happen (it shares the log's pass over the batches when the log is on)."""
    proc = ServerProcess(tmp_path / "wh", env={"ICEFLOE_INSTRUMENTATION": "off"}).start()
    try:
        test_adbc_reads_a_wide_query_result(proc)
    finally:
        proc.stop()


def test_adbc_reads_a_wide_table_and_a_prepared_query(wide_server: ServerProcess) -> None:
    with fsql.connect(wide_server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM ns.wide")
        _check_rows(cur.fetch_arrow_table())
        cur.execute("SELECT * FROM ns.wide WHERE i >= ?", parameters=(0,))
        _check_rows(cur.fetch_arrow_table())


def test_change_scan_of_wide_rows_fits_a_default_client(wide_server: ServerProcess) -> None:
    seq = wide_server.wide_seq  # type: ignore[attr-defined]  # set by the fixture
    client = flight.FlightClient(wide_server.location, generic_options=DEFAULT_LIMIT_OPTIONS)
    request = {"changes": "ns.wide", "after": 0, "until": seq}
    descriptor = flight.FlightDescriptor.for_command(json.dumps(request).encode())
    info = client.get_flight_info(descriptor)
    parts = [client.do_get(endpoint.ticket).read_all() for endpoint in info.endpoints]
    _check_rows(pa.concat_tables(parts).select(["i", "s"]))


def test_row_feed_of_wide_rows_fits_a_default_client(wide_server: ServerProcess) -> None:
    client = flight.FlightClient(wide_server.location, generic_options=DEFAULT_LIMIT_OPTIONS)
    request = {"feed": "rows.v1", "after": 0, "tables": ["ns.wide"], "heartbeat_ms": 100}
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
    writer.done_writing()
    batches: list[pa.RecordBatch] = []
    while True:
        chunk = reader.read_chunk()
        if chunk.data is not None:
            batches.append(chunk.data)
        meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else {}
        if meta.get("commit", {}).get("seq") == wide_server.wide_seq:  # type: ignore[attr-defined]
            break
    _check_rows(pa.Table.from_batches(batches).select(["i", "s"]))
    assert len(batches) > 1 and batches[-1].num_rows  # the commit's message still carries rows
    reader.cancel()  # a feed never ends by itself
    client.close()


def test_slices_are_zero_copy_and_small_batches_untouched() -> None:
    batch = _wide(300).to_batches()[0]
    pieces = list(sliced(batch))
    assert all(p.nbytes <= MAX_MESSAGE_BYTES for p in pieces)
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches([batch]))
    # Slices share the original buffers (no copy).
    assert pieces[1].column(1).buffers()[2].address == batch.column(1).buffers()[2].address
    small = pa.table({"a": [1, 2, 3]})
    assert bounded_table(small) is small
    # A row wider than the limit goes alone.
    huge = pa.RecordBatch.from_pydict({"s": ["x" * 10, "y" * (MAX_MESSAGE_BYTES + 1), "z"]})
    assert [p.num_rows for p in sliced(huge)] == [1, 1, 1]
