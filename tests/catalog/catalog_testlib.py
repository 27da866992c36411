"""Shared helpers for the catalog tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.io import load_file_io
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BooleanType,
    FloatType,
    IntegerType,
    ListType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from catalog.maintenance_worker import MaintenanceWorker

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])

# An Iceberg schema with every kind of nesting, a required field and an identifier field.
# Ids are numbered as catalogs assign fresh ones (top-level fields first), so it round-trips.
NESTED = Schema(
    NestedField(1, "foo", StringType(), required=False),
    NestedField(2, "bar", IntegerType(), required=True),
    NestedField(3, "baz", BooleanType(), required=False),
    NestedField(4, "tags", ListType(7, StringType(), element_required=True), required=True),
    NestedField(5, "attrs", MapType(8, StringType(), 9, IntegerType(), value_required=True), required=True),
    NestedField(
        6, "where", StructType(NestedField(10, "lat", FloatType()), NestedField(11, "lon", FloatType())), required=False
    ),
    identifier_field_ids=[2],
)


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def local_path(location: str) -> str:
    parsed = urlparse(location)
    return parsed.path if parsed.scheme == "file" else location


def referenced_files(table: Table) -> set[str]:
    """Local paths of every manifest list, manifest and data file the current metadata references.

    Manifests are shared between snapshots, so each is read once.
    """
    files: set[str] = set()
    manifests = {}
    for snapshot in table.metadata.snapshots:
        files.add(local_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(table.io):
            manifests.setdefault(manifest.manifest_path, manifest)
    for path, manifest in manifests.items():
        files.add(local_path(path))
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            files.add(local_path(entry.data_file.file_path))
    return files


def as_uri(location: str) -> str:
    """A location as a URI (a plain local path becomes ``file://``)."""
    return location if "://" in location else f"file://{location}"


def file_exists(cat: Catalog, location: str) -> bool:
    """Whether the file at ``location`` exists, read with the catalog's storage settings
    (a local path, a ``file://`` URI or an object in the catalog's S3 store)."""
    return bool(load_file_io(dict(cat.properties), location).new_input(location).exists())


def missing_files(table: Table) -> list[str]:
    return sorted(p for p in referenced_files(table) | {local_path(table.metadata_location)} if not os.path.exists(p))


def id_rows(n: int, start: int) -> pa.Table:
    """``n`` rows of the ``catalog`` fixture's table: ids ``start``, ``start + 1``, ..."""
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def appender_with_files(cat: Any, files: int, rows_each: int) -> Any:
    """An ``Appender`` on ``cat`` after ``files`` appends of ``rows_each`` ids each (one file
    per append): ids 0 .. files * rows_each - 1."""
    from catalog.append import Appender

    appender = Appender(cat)
    for i in range(files):
        appender.append_table(("ns", "t"), id_rows(rows_each, i * rows_each))
    return appender


class Interleaved(MaintenanceWorker):
    """A real worker with something else happening right before or after a chosen call
    (once each): the races compaction must survive."""

    def __init__(
        self,
        inner: MaintenanceWorker,
        before: dict[Callable[..., Any], Callable[[], None]] | None = None,
        after: dict[Callable[..., Any], Callable[[], None]] | None = None,
    ) -> None:
        super().__init__(in_process=True)
        self.inner, self.before, self.after = inner, dict(before or {}), dict(after or {})
        self.calls: list[str] = []

    def run(self, fn: Any, *args: Any) -> Any:
        self.calls.append(fn.__name__)
        if (action := self.before.pop(fn, None)) is not None:
            action()
        result = self.inner.run(fn, *args)
        if (action := self.after.pop(fn, None)) is not None:
            action()
        return result
