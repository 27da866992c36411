"""The catalog and the embedded API over an ``s3://bucket/prefix`` warehouse on a real S3
server: tables live as objects under the prefix, the catalog of record in a local RocksDB, and
the warehouse sandbox holds on bucket + prefix."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3_support import BUCKET, S3Server

import icefloe
from catalog import RocksCatalog
from catalog.object_store import S3Settings, StorageConfigError
from catalog.sandbox import InvalidLocationError, OutsideTableError

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def _catalog(tmp_path: Path, warehouse: str, server: S3Server) -> RocksCatalog:
    return RocksCatalog("t", warehouse=warehouse, **{"catalog-path": str(tmp_path / "catalog"),
                                                     "read-only": "false", **server.io_properties()})


def test_embedded_api_on_s3(tmp_path: Path, s3_server: S3Server, s3_warehouse: str,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    prefix = s3_warehouse.removeprefix(f"s3://{BUCKET}/")
    with icefloe.open(s3_warehouse, catalog_path=tmp_path / "catalog", s3_endpoint=s3_server.endpoint,
                      s3_path_style=True) as lake:
        lake.create_namespace("ns")
        table = lake.create_table("ns.t", SCHEMA)
        first = table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
        table.append(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
        assert sorted(table.scan().to_table().column("id").to_pylist()) == [1, 2, 3]
        changed = table.changes(after=first.seq).read_all()
        assert changed.column("id").to_pylist() == [3]
    assert any(k.startswith(f"{prefix}/ns/t/data/") for k in s3_server.keys(prefix))
    assert not (tmp_path / "catalog" / "ns").exists()


def test_embedded_api_needs_catalog_path_and_good_settings(s3_server: S3Server, s3_warehouse: str) -> None:
    with pytest.raises(icefloe.InvalidArgument, match="catalog-path"):
        icefloe.open(s3_warehouse, s3_endpoint=s3_server.endpoint)
    with pytest.raises(icefloe.InvalidArgument, match="s3-endpoint must be"):
        icefloe.open(s3_warehouse, catalog_path="/tmp/x", s3_endpoint="127.0.0.1:9000")


def test_settings_resolve_from_flags_file_and_environment(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"}
    props = S3Settings.resolve("http://127.0.0.1:9/", None, True, environ=env).io_properties()
    assert props["s3.endpoint"] == "http://127.0.0.1:9"
    assert props["s3.region"] == "eu-west-1"
    assert props["s3.force-virtual-addressing"] == "false"
    assert (props["s3.access-key-id"], props["s3.secret-access-key"]) == ("k", "s")
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = fk\naws_secret_access_key = fs\n")
    props = S3Settings.resolve(None, "us-west-2", False, str(creds), environ=env).io_properties()
    assert (props["s3.access-key-id"], props["s3.secret-access-key"]) == ("fk", "fs")
    assert "s3.endpoint" not in props and props["s3.region"] == "us-west-2"
    with pytest.raises(StorageConfigError, match=r"has no \[other\] section"):
        S3Settings.resolve(None, None, False, str(creds), environ={"AWS_PROFILE": "other"})
    with pytest.raises(StorageConfigError, match="both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        S3Settings.resolve(None, None, False, environ={"AWS_ACCESS_KEY_ID": "k"})
    timed = S3Settings.resolve(None, None, False, environ={"ICEFLOE_S3_REQUEST_TIMEOUT": "2.5"})
    assert timed.io_properties()["s3.request-timeout"] == "2.5"
    for bad in ("abc", "0", "-1", "99999"):
        with pytest.raises(StorageConfigError, match=r"ICEFLOE_S3_REQUEST_TIMEOUT must be a number of seconds"):
            S3Settings.resolve(None, None, False, environ={"ICEFLOE_S3_REQUEST_TIMEOUT": bad})
    creds.write_text("[default]\naws_access_key_id = fk\n")
    with pytest.raises(StorageConfigError, match="needs aws_access_key_id and aws_secret_access_key"):
        S3Settings.resolve(None, None, False, str(creds), environ={})


def test_sandbox_holds_on_bucket_and_prefix(tmp_path: Path, s3_server: S3Server, s3_warehouse: str) -> None:
    cat = _catalog(tmp_path, s3_warehouse, s3_server)
    try:
        cat.create_namespace("ns")
        # Another bucket, a sibling prefix that shares the warehouse's name start, the root.
        for location in ("s3://other-bucket/t", f"{s3_warehouse}-2/t", s3_warehouse,
                         f"{s3_warehouse}/ns/../../escape"):
            with pytest.raises(InvalidLocationError):
                cat.create_table("ns.bad", SCHEMA, location=location)
        table = cat.create_table("ns.t", SCHEMA)
        assert table.location() == f"{s3_warehouse}/ns/t"
        other = cat.create_table("ns.t2", SCHEMA)
        # A data file outside the table's prefix (another table's, or another prefix) is refused
        # before any request is made.
        fs = s3_server.filesystem()
        outside = f"{s3_warehouse}-x/f.parquet"
        with fs.open_output_stream(outside.removeprefix("s3://")) as out:
            pq.write_table(pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA), out)
        for location in (outside, f"{other.location()}/data/f.parquet"):
            with pytest.raises(OutsideTableError):
                table.io.new_input(location)
            with pytest.raises(OutsideTableError):
                table.io.new_output(location)
            with pytest.raises(OutsideTableError):
                table.io.delete(location)
        with pytest.raises(OutsideTableError):
            table.add_files([outside])
        assert table.scan().to_arrow().num_rows == 0
    finally:
        cat.close()
