"""Fixtures of the security tests (shared data and builders live in security_support)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from security_support import Pki, make_pki, write_users_file
from servers import ServerProcess


@pytest.fixture(scope="session")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_users_file(tmp_path_factory.mktemp("users") / "users.toml")


@pytest.fixture
def auth_server(warehouse: Path, users_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(warehouse, ["--users", str(users_file)]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))
