"""Shared helpers for the catalog tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pyarrow as pa
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


def missing_files(table: Table) -> list[str]:
    return sorted(p for p in referenced_files(table) | {local_path(table.metadata_location)} if not os.path.exists(p))
