"""``icefloe serve --warehouse s3://bucket/prefix`` against a real S3 server (s3s-fs).

The catalog of record stays in a local RocksDB at ``--catalog-path``; every table file is an
object under the prefix. Flight SQL, DoPut (small and bulk, multi-file), change scans and
maintenance run over the store, and nothing of a table lands on local disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import adbc_driver_flightsql.dbapi as fsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from doput_client import do_put
from s3_support import BUCKET, S3Server
from servers import ServerProcess

from catalog import RocksCatalog
from tests.flight_server.feed.feed_helpers import FeedReader


def _query(conn: fsql.Connection, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def _serve(tmp_path: Path, warehouse: str, server: S3Server, *extra: str) -> ServerProcess:
    return ServerProcess(tmp_path / "unused", ["--warehouse", warehouse, "--catalog-path",
                                               str(tmp_path / "catalog"), *extra], env=server.env()).start()


def _catalog(tmp_path: Path, warehouse: str, server: S3Server) -> RocksCatalog:
    return RocksCatalog("setup", warehouse=warehouse, **{"catalog-path": str(tmp_path / "catalog"),
                                                         "read-only": "false", **server.io_properties()})


def test_sql_doput_changes_and_maintenance_on_s3(tmp_path: Path, s3_server: S3Server, s3_warehouse: str) -> None:
    prefix = s3_warehouse.removeprefix(f"s3://{BUCKET}/")
    cat = _catalog(tmp_path, s3_warehouse, s3_server)
    cat.create_namespace("bulk")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    # Small row groups: a bulk DoPut is encoded by several lanes, one file each (multi-file).
    cat.create_table("bulk.t", schema, properties={"write.parquet.row-group-limit": "5000"})
    cat.close()
    proc = _serve(tmp_path, s3_warehouse, s3_server)
    try:
        with fsql.connect(proc.location, autocommit=True) as conn:
            with conn.cursor() as cur:
                cur.execute("CREATE SCHEMA ns")
                cur.execute("CREATE TABLE ns.t (id BIGINT, v VARCHAR)")
                cur.execute("INSERT INTO ns.t VALUES (1, 'a'), (2, 'b')")
            first = None
            for i in range(3):
                data = pa.table({"id": pa.array(range(10 + i * 5, 15 + i * 5), pa.int64()),
                                 "v": [f"r{j}" for j in range(5)]})
                result = do_put(proc.location, ("ns", "t"), data)
                first = first or result
                assert result["rows"] == 5 and result["duplicate"] is False
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [17]
            assert sorted(_query(conn, "SELECT id FROM ns.t WHERE id >= 22").column("id").to_pylist()) == [22, 23, 24]
            with conn.cursor() as cur:
                cur.execute("DELETE FROM ns.t WHERE id < 2")
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [16]

            bulk = pa.table({"id": pa.array(range(40_000), pa.int64()), "v": [f"v{j % 97}" for j in range(40_000)]})
            result = do_put(proc.location, ("bulk", "t"), bulk, batch_rows=5000)
            assert result["rows"] == 40_000
            files = _query(conn, 'SELECT path FROM bulk."t$files"').column("path").to_pylist()
            assert len(files) > 1, "a bulk append writes several files"
            assert all(f.startswith(f"{s3_warehouse}/bulk/t/data/") for f in files)
            got = _query(conn, "SELECT count(*) AS n, sum(id) AS s FROM bulk.t")
            assert got.column("n").to_pylist() == [40_000]
            assert got.column("s").to_pylist() == [sum(range(40_000))]

        # A change scan over the three DoPut commits: exactly their rows.
        client = flight.FlightClient(proc.location)
        try:
            assert first is not None
            command = {"changes": "ns.t", "after": first["commit_seq"] - 1, "until": first["commit_seq"] + 2}
            info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command).encode()))
            changed = pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints)
            assert sorted(changed.column("id").to_pylist()) == list(range(10, 25))

            # Orphans are found by listing the prefix: an old stray object goes, files in use stay.
            fs = s3_server.filesystem()
            stray = f"{BUCKET}/{prefix}/ns/t/data/stray.parquet"
            with fs.open_output_stream(stray) as out:
                out.write(b"not referenced")
            os.utime(_object_file(s3_server, stray), (1_000_000_000, 1_000_000_000))
            action = flight.Action("icefloe.maintain", json.dumps({"table": "ns.t", "orphan_grace_s": 60}).encode())
            reports = [json.loads(r.body.to_pybytes()) for r in client.do_action(action)]
            assert reports and reports[0]["removed_orphans"] == 1, reports
            # Compaction rewrote the small files of the five writes into new objects, and
            # expiry dropped snapshots (their files stay until the orphan grace has passed).
            assert reports[0]["compacted_files"] >= 4 and reports[0]["written_files"] >= 1, reports
        finally:
            client.close()
        assert f"{prefix}/ns/t/data/stray.parquet" not in s3_server.keys(prefix)
        with fsql.connect(proc.location, autocommit=True) as conn:
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [16]
    finally:
        proc.stop()
    # Nothing of a table is on local disk: the catalog folder holds only the catalog.
    local = {p.name for p in (tmp_path / "catalog").iterdir()}
    assert not any(name in local for name in ("ns", "bulk")), local
    keys = s3_server.keys(prefix)
    assert any(k.startswith(f"{prefix}/ns/t/metadata/") and k.endswith(".metadata.json") for k in keys)


def _object_file(server: S3Server, path: str) -> Path:
    """The file s3s-fs keeps an object in (its root folder / bucket / key): to age it."""
    return server.root / path


def test_s3_flags_are_checked(tmp_path: Path, s3_server: S3Server, s3_warehouse: str) -> None:
    """Bad object-store settings stop the server at start with a precise message."""
    from servers import ServerProcess as Proc

    cases = [
        (["--warehouse", s3_warehouse], "needs --catalog-path"),
        (["--warehouse", s3_warehouse, "--catalog-path", str(tmp_path / "c"), "--s3-endpoint", "ftp://x"],
         "--s3-endpoint must be http(s)://HOST[:PORT]"),
        (["--warehouse", s3_warehouse, "--catalog-path", str(tmp_path / "c"),
          "--s3-credentials-file", str(tmp_path / "missing")], "cannot read the S3 credentials file"),
    ]
    for args, message in cases:
        proc = Proc(tmp_path / "unused", args, env={**s3_server.env(), "ICEFLOE_S3_ENDPOINT": ""})
        with pytest.raises(RuntimeError) as failed:
            proc.start(timeout=30)
        assert message in str(failed.value)
        assert "Traceback" not in str(failed.value)


def test_staged_appends_and_feeds_on_s3(tmp_path: Path, s3_server: S3Server, s3_warehouse: str) -> None:
    proc = _serve(tmp_path, s3_warehouse, s3_server)
    try:
        with fsql.connect(proc.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA ns")
            cur.execute("CREATE TABLE ns.t (id BIGINT, v VARCHAR)")
        tokens = []
        for part in range(2):  # two writers of one job stage their files, one commit lands both
            data = pa.table({"id": pa.array(range(part * 10, part * 10 + 10), pa.int64()), "v": ["s"] * 10})
            tokens.append(do_put(proc.location, ("ns", "t"), data, stage="job-1")["token"])
        client = flight.FlightClient(proc.location)
        try:
            body = json.dumps({"table": "ns.t", "tokens": tokens, "idempotency_key": "k1"}).encode()
            results = list(client.do_action(flight.Action("icefloe.commit-staged", body)))
            committed = json.loads(results[0].body.to_pybytes())
        finally:
            client.close()
        assert committed["rows"] == 20 and committed["duplicate"] is False
        do_put(proc.location, ("ns", "t"), pa.table({"id": pa.array([100], pa.int64()), "v": ["d"]}))
        with fsql.connect(proc.location, autocommit=True) as conn:
            assert _query(conn, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [21]

        with FeedReader(proc.location, {"feed": "commits.v1", "after": 0, "tables": ["ns.t"]}) as feed:
            operations = [e["operation"] for e in feed.events(2, timeout=60)]
        assert operations[-2:] == ["append", "append"], operations
        with FeedReader(proc.location, {"feed": "rows.v1", "after": 0, "tables": ["ns.t"]}) as feed:
            rows = feed.events(21, timeout=60)
        assert sorted(r["id"] for r in rows) == [*range(20), 100]
    finally:
        proc.stop()


def test_offline_maintain_on_s3(tmp_path: Path, s3_server: S3Server, s3_warehouse: str) -> None:
    """``icefloe maintain --warehouse s3://... --catalog-path DIR`` with no server running."""
    import subprocess
    import sys

    prefix = s3_warehouse.removeprefix(f"s3://{BUCKET}/")
    cat = _catalog(tmp_path, s3_warehouse, s3_server)
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    cat.close()
    stray = f"{BUCKET}/{prefix}/ns/t/data/stray.parquet"
    with s3_server.filesystem().open_output_stream(stray) as out:
        out.write(b"x")
    os.utime(_object_file(s3_server, stray), (1_000_000_000, 1_000_000_000))
    env = {**os.environ, **s3_server.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("ICEFLOE_URI", None)
    done = subprocess.run([sys.executable, "-m", "flight_server.cli", "maintain", "ns.t", "--warehouse", s3_warehouse,
                           "--catalog-path", str(tmp_path / "catalog"), "--orphan-grace-s", "60"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["removed_orphans"] == 1
    assert f"{prefix}/ns/t/data/stray.parquet" not in s3_server.keys(prefix)
    # Without --catalog-path an s3:// warehouse is refused with a precise message.
    done = subprocess.run([sys.executable, "-m", "flight_server.cli", "maintain", "--warehouse", s3_warehouse],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0 and "needs --catalog-path" in done.stderr and "Traceback" not in done.stderr
