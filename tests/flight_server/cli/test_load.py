"""``icefloe load FILE ns.t`` against a real server: Parquet and CSV in, one commit, or nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from cli_runner import clean_failure, icefloe, running
from servers import ServerProcess

from flight_server.cli.load import open_source


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running(ServerProcess(tmp_path_factory.mktemp("cli_load") / "warehouse")) as proc:
        yield proc


def _sql(server: ServerProcess, statement: str) -> list[dict[str, object]]:
    result = icefloe("sql", "--uri", server.location, "--format", "json", statement)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def _parquet(path: Path, rows: int, start: int = 0) -> Path:
    ids = range(start, start + rows)
    table = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"r{i}" for i in ids], pa.string())})
    pq.write_table(table, path, row_group_size=max(1, rows // 4))
    return path


def test_parquet_into_an_existing_table_streams_in_batches(server: ServerProcess, tmp_path: Path) -> None:
    _sql(server, "CREATE SCHEMA p_ns")
    _sql(server, "CREATE TABLE p_ns.t (id BIGINT, v VARCHAR)")
    data = _parquet(tmp_path / "data.parquet", 10_000)
    result = icefloe("load", "--uri", server.location, str(data), "p_ns.t", "--batch-rows", "1000")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["table"] == "p_ns.t" and answer["rows"] == 10_000 and answer["duplicate"] is False
    assert answer["commit_seq"] > 0
    assert result.stderr == ""  # no progress line when stderr is not a terminal
    assert _sql(server, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM p_ns.t") == [{"n": 10_000, "d": 10_000}]
    history = _sql(server, 'SELECT count(*) AS n FROM p_ns."t$snapshots"')
    assert history == [{"n": 1}]  # one append, one snapshot


def test_missing_table_needs_create(server: ServerProcess, tmp_path: Path) -> None:
    data = _parquet(tmp_path / "fresh.parquet", 5)
    refused = icefloe("load", "--uri", server.location, str(data), "new_ns.fresh")
    clean_failure(refused, "table new_ns.fresh does not exist")
    assert "--create" in refused.stderr
    result = icefloe("load", "--uri", server.location, str(data), "new_ns.fresh", "--create", "--progress")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"table": "new_ns.fresh", "rows": 5, "created": True}
    assert "loading fresh.parquet into new_ns.fresh" in result.stderr and "(100%)" in result.stderr
    assert _sql(server, "SELECT CAST(sum(id) AS BIGINT) AS s FROM new_ns.fresh") == [{"s": 10}]
    again = icefloe("load", "--uri", server.location, str(data), "new_ns.fresh", "--create")  # exists now: appends
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows"] == 5 and "commit_seq" in json.loads(again.stdout)


def test_csv_columns_read_as_the_table_s_types(server: ServerProcess, tmp_path: Path) -> None:
    _sql(server, "CREATE SCHEMA c_ns")
    _sql(server, "CREATE TABLE c_ns.prices (id BIGINT, price DOUBLE, day DATE)")
    csv = tmp_path / "prices.csv"
    csv.write_text("id,price,day\n1,10,2024-01-01\n2,11,2024-01-02\n")  # prices look like integers
    result = icefloe("load", "--uri", server.location, str(csv), "c_ns.prices")
    assert result.returncode == 0, result.stderr
    assert _sql(server, "SELECT sum(price) AS total, max(day) AS last FROM c_ns.prices") == [
        {"total": 21.0, "last": "2024-01-02"}
    ]
    tsv = tmp_path / "more.txt"
    tsv.write_text("id\tprice\tday\n3\t1.5\t2024-02-01\n")
    clean_failure(icefloe("load", "--uri", server.location, str(tsv), "c_ns.prices"), "--format")
    result = icefloe("load", "--uri", server.location, str(tsv), "c_ns.prices", "--format", "csv",
                     "--delimiter", "\t")
    assert result.returncode == 0, result.stderr
    assert _sql(server, "SELECT count(*) AS n FROM c_ns.prices") == [{"n": 3}]


def test_a_file_that_breaks_mid_stream_commits_nothing(server: ServerProcess, tmp_path: Path) -> None:
    _sql(server, "CREATE SCHEMA b_ns")
    _sql(server, "CREATE TABLE b_ns.t (id BIGINT, v VARCHAR)")
    big = tmp_path / "bad.csv"
    with big.open("w") as out:  # several 1 MiB blocks of good rows, then a value that is not a number
        out.write("id,v\n")
        out.writelines(f"{i},row-{i}\n" for i in range(400_000))
        out.write("oops,x\n")
    result = icefloe("load", "--uri", server.location, str(big), "b_ns.t")
    clean_failure(result, "CSV conversion error")
    # Where the user finds the bad value: its line (the header is line 1) and column name,
    # not the block boundary and a 0-based column index.
    assert "line 400002, column 'id'" in result.stderr, result.stderr
    assert "after " not in result.stderr and "#0" not in result.stderr
    assert "nothing was committed" in result.stderr
    assert _sql(server, "SELECT count(*) AS n FROM b_ns.t") == [{"n": 0}]
    assert _sql(server, 'SELECT count(*) AS n FROM b_ns."t$snapshots"') == [{"n": 0}]
    # Refused by the server (a column of another type): also nothing, and the server's reason.
    clash = tmp_path / "clash.parquet"
    pq.write_table(pa.table({"id": pa.array(["text"]), "v": pa.array(["x"])}), clash)
    clean_failure(icefloe("load", "--uri", server.location, str(clash), "b_ns.t"), "schema mismatch")
    assert _sql(server, "SELECT count(*) AS n FROM b_ns.t") == [{"n": 0}]


def test_a_bad_first_block_exits_1_every_time(server: ServerProcess, tmp_path: Path) -> None:
    """A conversion error in the first block used to end, now and then, in "terminate called
    without an active exception" and exit code 134 (Arrow's read-ahead thread still waiting
    for the GIL while the interpreter exited). Four loads at a time, as a loaded machine runs
    them, 52 in all."""
    from concurrent.futures import ThreadPoolExecutor

    _sql(server, "CREATE SCHEMA f_ns")
    _sql(server, "CREATE TABLE f_ns.t (id BIGINT, v VARCHAR)")
    bad = tmp_path / "first.csv"
    bad.write_text('id,v\n1,a\n2,"two\nlines"\noops,c\n4,d\n')
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: icefloe("load", "--uri", server.location, str(bad), "f_ns.t"), range(52)))
    codes = [r.returncode for r in results]
    assert codes == [1] * len(codes), [(r.returncode, r.stderr) for r in results if r.returncode != 1]
    for result in results:
        clean_failure(result, "line 5, column 'id': CSV conversion error to int64: invalid value 'oops'")
        assert "terminate" not in result.stderr and "nothing was committed" in result.stderr
    assert _sql(server, 'SELECT count(*) AS n FROM f_ns."t$snapshots"') == [{"n": 0}]
    wrong = tmp_path / "wide.csv"
    wrong.write_text("id,v\n1,a\n2,b,c\n")
    clean_failure(icefloe("load", "--uri", server.location, str(wrong), "f_ns.t"), "line 3: Expected 2 columns, got 3")


def test_a_typo_d_header_is_refused_unless_evolve(server: ServerProcess, tmp_path: Path) -> None:
    """A CSV whose header does not match used to add columns to the table silently."""
    _sql(server, "CREATE SCHEMA e_ns")
    _sql(server, "CREATE TABLE e_ns.t (id INTEGER, name VARCHAR)")
    typo = tmp_path / "typo.csv"
    typo.write_text("ID,nmae\n1,a\n2,b\n")  # ID: only the case differs (fine); nmae: a typo
    refused = icefloe("load", "--uri", server.location, str(typo), "e_ns.t")
    clean_failure(refused, "column 'nmae' (did you mean 'name'?) is not in the table (its columns: id, name)")
    assert "--evolve" in refused.stderr and "nothing was committed" in refused.stderr
    assert _sql(server, "SELECT count(*) AS n FROM e_ns.t") == [{"n": 0}]
    no_column = icefloe("sql", "--uri", server.location, "SELECT nmae FROM e_ns.t")  # the table did not grow
    assert no_column.returncode != 0 and "nmae" in no_column.stderr
    fixed = tmp_path / "fixed.csv"
    fixed.write_text("ID,name\n1,a\n2,b\n")  # ID is read as the table's INTEGER, not refused as int64
    assert icefloe("load", "--uri", server.location, str(fixed), "e_ns.t").returncode == 0
    evolve = icefloe("load", "--uri", server.location, str(typo), "e_ns.t", "--evolve")
    assert evolve.returncode == 0, evolve.stderr
    assert _sql(server, "SELECT count(*) AS n, count(nmae) AS typo FROM e_ns.t") == [{"n": 4, "typo": 2}]


def test_idempotency_key_makes_a_retry_commit_nothing(server: ServerProcess, tmp_path: Path) -> None:
    _sql(server, "CREATE SCHEMA i_ns")
    _sql(server, "CREATE TABLE i_ns.t (id BIGINT, v VARCHAR)")
    data = _parquet(tmp_path / "once.parquet", 7)
    first = icefloe("load", "--uri", server.location, str(data), "i_ns.t", "--idempotency-key", "load-0001")
    second = icefloe("load", "--uri", server.location, str(data), "i_ns.t", "--idempotency-key", "load-0001")
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert (one["duplicate"], two["duplicate"]) == (False, True) and one["commit_seq"] == two["commit_seq"]
    assert _sql(server, "SELECT count(*) AS n FROM i_ns.t") == [{"n": 7}]


def test_bad_arguments(server: ServerProcess, tmp_path: Path) -> None:
    data = _parquet(tmp_path / "x.parquet", 1)
    clean_failure(icefloe("load", "--uri", server.location, str(data), "no_namespace"), "qualified name")
    clean_failure(icefloe("load", "--uri", server.location, str(tmp_path / "none.parquet"), "a.b"), "does not exist")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    _sql(server, "CREATE SCHEMA j_ns")
    _sql(server, "CREATE TABLE j_ns.t (id BIGINT, v VARCHAR)")
    clean_failure(icefloe("load", "--uri", server.location, str(junk), "j_ns.t"), "cannot read")
    clean_failure(icefloe("load", "--uri", server.location, str(data), "j_ns.t", "--delimiter", "ab"), "one character")
    pacsv.write_csv(pa.table({"id": [1]}), tmp_path / "ok.csv")
    clean_failure(icefloe("load", "--uri", "grpc://127.0.0.1:1", str(tmp_path / "ok.csv"), "j_ns.t"), "cannot reach")


def test_a_parquet_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """Reading a file for ``load`` holds about one row group, not the whole file: pyarrow's
    read-ahead over a whole-file ``iter_batches`` kept every column chunk read so far (the
    client grew by 2.5 GB loading TPC-H SF10's lineitem)."""
    rows, groups = 400_000, 40
    path = tmp_path / "wide.parquet"
    table = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "comment": pa.array([f"row {i} of a file with a comment column long enough to weigh" for i in range(rows)]),
    })
    pq.write_table(table, path, row_group_size=rows // groups, compression="none")
    file_bytes = path.stat().st_size
    del table
    source = open_source(str(path), "parquet", 8_192, ",", None)
    base = pa.total_allocated_bytes()
    peak, seen = 0, 0
    try:
        for batch in source.batches:
            seen += batch.num_rows
            peak = max(peak, pa.total_allocated_bytes() - base)
    finally:
        source.close()
    assert seen == rows
    # one row group is 1/40 of the file; the whole-file read held over 80% of it by the end
    assert peak < file_bytes / 4, f"reading held {peak} bytes of a {file_bytes}-byte file"
