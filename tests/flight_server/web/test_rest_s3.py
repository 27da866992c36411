"""The REST catalog over an S3 warehouse hands engines the storage settings they need.

pyiceberg's ``RestCatalog`` is given only the catalog URI (no endpoint, no keys, no region):
``/v1/config`` and ``LoadTable`` carry the S3 endpoint, path-style addressing, region and the
server's static keys, with which it writes and reads the tables' objects on the real S3 server;
icefloe sees those commits over Flight SQL, and pyiceberg reads icefloe's own appends.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from doput_client import do_put
from pyiceberg.catalog.rest import RestCatalog
from s3_support import BUCKET, S3Server
from servers import ServerProcess

from tests.flight_server.web.rest_support import rest_url, sql

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def test_pyiceberg_rest_reads_and_writes_s3_tables_without_storage_settings(
    tmp_path: Path, s3_server: S3Server, s3_warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client process has no AWS settings of its own: whatever it uses came from the catalog.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    prefix = s3_warehouse.removeprefix(f"s3://{BUCKET}/")
    server = ServerProcess(tmp_path / "unused", ["--warehouse", s3_warehouse, "--catalog-path",
                                                 str(tmp_path / "catalog"), "--rest-port", "0"],
                           env=s3_server.env()).start()
    try:
        url = rest_url(server)
        overrides = httpx.get(f"{url}/v1/config").json()["overrides"]
        assert overrides["s3.endpoint"] == s3_server.endpoint
        assert overrides["s3.path-style-access"] == "true"
        assert overrides["s3.access-key-id"] == s3_server.access_key
        assert "s3.retry-strategy-impl" not in overrides  # the server's own tuning stays home

        catalog = RestCatalog("icefloe", uri=url)
        catalog.create_namespace("ns")
        table = catalog.create_table("ns.t", schema=SCHEMA)
        assert table.location() == f"{s3_warehouse}/ns/t"
        loaded = httpx.get(f"{url}/v1/namespaces/ns/tables/t").json()
        assert loaded["config"]["s3.endpoint"] == s3_server.endpoint
        assert loaded["storage-credentials"][0]["prefix"] == f"{s3_warehouse}/ns/t"

        table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
        assert sql(server.location, "SELECT count(*) AS n FROM ns.t").column("n").to_pylist() == [2]
        do_put(server.location, ("ns", "t"), pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
        again = catalog.load_table("ns.t").scan().to_arrow()
        assert sorted(again.column("id").to_pylist()) == [1, 2, 3]
        assert any(k.startswith(f"{prefix}/ns/t/data/") for k in s3_server.keys(prefix))
    finally:
        server.stop()
