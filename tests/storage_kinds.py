"""Where a test's warehouse lives: a local folder, or a prefix of the real S3 server.

Suites that should hold on both take the ``warehouse`` fixture through ``storage_kind``: a module
opts in with ``pytestmark = ON_EVERY_STORAGE`` and its tests run once per kind, sharing the one
S3 server of the session. The local kind is the plain ``Path`` the tests always had; the S3 kind
is an ``S3Warehouse``. Helpers that look at a warehouse (open its catalog, list its files, start
a server on it) take either, through the functions here.
"""

from __future__ import annotations

import fnmatch
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from s3_support import BUCKET, S3Server
from servers import ServerProcess

from catalog import RocksCatalog
from catalog.durable_io import local_path
from catalog.object_store import S3Settings

ON_EVERY_STORAGE = pytest.mark.parametrize("storage_kind", ["local", "s3"], indirect=True)


@dataclass(frozen=True)
class S3Warehouse:
    """An ``s3://`` warehouse on the test S3 server, its catalog of record in a local folder."""

    store: S3Server
    prefix: str
    catalog_path: Path

    @classmethod
    def fresh(cls, store: S3Server, folder: Path) -> S3Warehouse:
        return cls(store, f"wh-{uuid.uuid4().hex[:12]}", folder / "catalog")

    @property
    def uri(self) -> str:
        return f"s3://{BUCKET}/{self.prefix}"

    def __str__(self) -> str:
        return self.uri

    def io_properties(self) -> dict[str, str]:
        """The FileIO settings the server derives for this store (retries, timeouts included)."""
        settings = S3Settings(endpoint=self.store.endpoint, path_style=True, access_key_id=self.store.access_key,
                              secret_access_key=self.store.secret_key)
        return settings.io_properties()

    def server_args(self) -> list[str]:
        return ["--warehouse", self.uri, "--catalog-path", str(self.catalog_path)]

    def keys(self, table: str) -> list[str]:
        return self.store.keys(f"{self.prefix}/{table.replace('.', '/')}")


Warehouse = Path | S3Warehouse


def open_catalog(warehouse: Warehouse, name: str = "test", read_only: bool = False, **props: str) -> RocksCatalog:
    mode = {"read-only": "true" if read_only else "false"}
    if isinstance(warehouse, S3Warehouse):
        return RocksCatalog(name, warehouse=warehouse.uri, **{"catalog-path": str(warehouse.catalog_path),
                                                               **warehouse.io_properties(), **mode, **props})
    return RocksCatalog(name, warehouse=str(warehouse), **{**mode, **props})


def start_server(warehouse: Warehouse, extra_args: list[str] | None = None, **kwargs: Any) -> ServerProcess:
    """A real ``icefloe serve`` on this warehouse (not yet started)."""
    if isinstance(warehouse, S3Warehouse):
        return ServerProcess(warehouse.catalog_path.parent / "unused", [*warehouse.server_args(), *(extra_args or [])],
                             env={**warehouse.store.env(), **kwargs.pop("env", {})}, **kwargs)
    return ServerProcess(warehouse, extra_args or [], **kwargs)


def table_files(warehouse: Warehouse, table: str, pattern: str = "*") -> list[str]:
    """The files (objects) under a table's folder whose name matches ``pattern``: local paths,
    or ``s3://`` URIs (as the catalog names them)."""
    if isinstance(warehouse, S3Warehouse):
        return sorted(f"s3://{BUCKET}/{k}" for k in warehouse.keys(table)
                      if fnmatch.fnmatch(k.rsplit("/", 1)[-1], pattern))
    folder = warehouse.joinpath(*table.split("."))
    return sorted(str(p) for p in folder.rglob(pattern)) if folder.exists() else []


def as_listed(location: str) -> str:
    """A location as ``table_files`` lists it: a local path for ``file://`` (a local warehouse
    names its files by URI), an object store's URI unchanged."""
    return local_path(location) or location


@pytest.fixture
def storage_kind(request: pytest.FixtureRequest) -> str:
    """``local`` unless a module asks for every kind (``ON_EVERY_STORAGE``)."""
    return str(getattr(request, "param", "local"))


def fresh_warehouse(kind: str, folder: Path, request: pytest.FixtureRequest) -> Warehouse:
    """A new warehouse of ``kind`` in ``folder`` (for module-scoped fixtures taking the kind as a
    parameter of their own, so a module's one server runs once per storage)."""
    if kind == "s3":
        return S3Warehouse.fresh(request.getfixturevalue("s3_server"), folder)
    return folder / "warehouse"


@pytest.fixture
def warehouse(storage_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Warehouse:
    return fresh_warehouse(storage_kind, tmp_path, request)
