"""Fixtures for the public API: one ``lake`` fixture, run over both backends, and the in-process
one over an S3 warehouse too (``icefloe.open("s3://...", catalog_path=..., s3_endpoint=...)``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_support import BUCKET, S3Server
from servers import ServerProcess

import icefloe

_names = itertools.count()


@pytest.fixture(scope="module")
def remote_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server per module (port 0); tests keep apart by namespace."""
    proc = ServerProcess(tmp_path_factory.mktemp("remote") / "warehouse").start()
    try:
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


@pytest.fixture(params=["local", "local-s3", "remote"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[icefloe.Lake]:
    if request.param == "local":
        opened = icefloe.open(tmp_path / "warehouse")
    elif request.param == "local-s3":
        store: S3Server = request.getfixturevalue("s3_server")
        # Keys from a shared-credentials file: no AWS_* variable of this process is touched.
        credentials = tmp_path / "credentials"
        credentials.write_text(f"[default]\naws_access_key_id = {store.access_key}\n"
                               f"aws_secret_access_key = {store.secret_key}\n")
        opened = icefloe.open(f"s3://{BUCKET}/lake-{next(_names)}-{tmp_path.name}", catalog_path=tmp_path / "catalog",
                              s3_endpoint=store.endpoint, s3_region="us-east-1", s3_path_style=True,
                              s3_credentials_file=credentials)
    else:
        server: ServerProcess = request.getfixturevalue("remote_server")
        opened = icefloe.connect(server.location)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def ns(lake: icefloe.Lake) -> str:
    """A fresh namespace in the lake."""
    name = f"ns{next(_names)}"
    lake.create_namespace(name)
    return name
