"""Fixtures for the public API: one ``lake`` fixture, run over both backends."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
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


@pytest.fixture(params=["local", "remote"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[icefloe.Lake]:
    if request.param == "local":
        opened = icefloe.open(tmp_path / "warehouse")
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
