"""Iceberg views in the catalog of record: create, register, load, replace, rename, drop, list.

A view is a pointer in RocksDB (``keys.VIEW``) to a view metadata JSON file (Iceberg's view
spec, modelled by ``pyiceberg.view.metadata``) under the view's own folder in the warehouse.
Tables and views share one name space per namespace (a name is a table or a view). Every
change is an ordinary catalog commit: the pointer moves in the same fsync'd RocksDB batch as
the commit sequence and a commit-log record (operation ``view-create`` / ``view-register`` /
``view-replace`` / ``view-rename`` / ``view-drop``), so the feed carries it like a table commit.

Updates of a replace are the REST spec's view updates; ids are assigned as Iceberg-Java's
``ViewMetadata.Builder`` assigns them (an added schema or version equal to an existing one
reuses its id, ``-1`` means the last one added).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchViewError,
    TableAlreadyExistsError,
    ViewAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from catalog import keys
from catalog.catalog_errors import MetadataFileMissingError
from catalog.durable_io import write_new
from catalog.lru import LockedLRU
from catalog.names import check_properties
from catalog.view_updates import VIEW_FORMAT_VERSION, apply, check_requirement

if TYPE_CHECKING:
    from catalog.catalog_internals import CatalogInternals

# Parsed view metadata by file location (every query naming a view loads it).
_parsed: LockedLRU[str, ViewMetadata] = LockedLRU(1024)


@dataclass(frozen=True)
class LoadedView:
    metadata_location: str
    metadata: ViewMetadata


def _pointer(catalog: CatalogInternals, ns: tuple[str, ...], name: str) -> dict[str, Any] | None:
    raw = catalog.store.get(keys.view_key(ns, name))
    return json.loads(raw) if raw is not None else None


def _pointer_value(location: str, previous: str | None, metadata: ViewMetadata) -> bytes:
    return json.dumps({"metadata_location": location, "previous_metadata_location": previous,
                       "view_uuid": metadata.view_uuid, "location": metadata.location}).encode("utf-8")


def view_folders(catalog: CatalogInternals) -> list[tuple[tuple[str, ...], str]]:
    """(identifier, folder) of every view: table locations must not overlap them."""
    found = []
    for key, raw in catalog.store.scan(keys.VIEW):
        ns, name = keys.decode_view_key(key)
        found.append(((*ns, name), json.loads(raw)["location"]))
    return found


def exists(catalog: CatalogInternals, ns: tuple[str, ...], name: str) -> bool:
    return _pointer(catalog, ns, name) is not None


def list_views(catalog: CatalogInternals, ns: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [(*ns, keys.decode_view_key(key)[1]) for key, _ in catalog.store.scan(keys.view_prefix(ns))]


def load(catalog: CatalogInternals, ns: tuple[str, ...], name: str) -> LoadedView:
    """Raises: NoSuchViewError."""
    pointer = _pointer(catalog, ns, name)
    if pointer is None:
        raise NoSuchViewError(f"View does not exist: {'.'.join((*ns, name))}")
    location = pointer["metadata_location"]
    # Metadata files are immutable: parsed once per location, served while the file exists
    # (a removed file fails as for tables, cached or not: see CatalogInternals._read_metadata).
    try:
        if _parsed.get(location) is not None and not catalog._load_file_io(location=location).new_input(
                location).exists():
            raise FileNotFoundError(location)
        return LoadedView(location, read_metadata(catalog, location))
    except FileNotFoundError:
        raise MetadataFileMissingError(location) from None


def read_metadata(catalog: CatalogInternals, location: str) -> ViewMetadata:
    """The view metadata file at ``location`` (parsed once per location).

    Raises: FileNotFoundError, ValueError (not view metadata)."""
    cached = _parsed.get(location)
    if cached is not None:
        return cached
    io = catalog._load_file_io(location=location)
    with io.new_input(location).open() as raw:
        stream = Compressor.get_compressor(location).stream_decompressor(raw)
        metadata = ViewMetadata.model_validate_json(stream.read())
    _parsed.put(location, metadata)
    return metadata


def _write(catalog: CatalogInternals, metadata: ViewMetadata, version: int) -> str:
    io = catalog.table_io(metadata.location)
    location = f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"
    io.confine(location)
    write_new(io, location, metadata.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))
    return location


def _version_of(location: str) -> int:
    try:
        return int(location.rsplit("/", 1)[-1].split("-", 1)[0])
    except ValueError:
        return 0


def _check_folder(catalog: CatalogInternals, location: str, identifier: tuple[str, ...]) -> str:
    """The view's folder: inside the warehouse, overlapping no table's or other view's folder."""
    return catalog.table_root(location, identifier)


def _free_name(catalog: CatalogInternals, ns: tuple[str, ...], name: str) -> None:
    qualified = ".".join((*ns, name))
    if exists(catalog, ns, name):
        raise ViewAlreadyExistsError(f"View already exists: {qualified}")
    if catalog._pointer(ns, name) is not None:
        raise TableAlreadyExistsError(f"Table with same name already exists: {qualified}")


def _free_rename_target(catalog: CatalogInternals, src: tuple[tuple[str, ...], str],
                        dst: tuple[tuple[str, ...], str]) -> None:
    # Iceberg-Java's wording for a taken rename target (clients match on it).
    move = f"Cannot rename {'.'.join((*src[0], src[1]))} to {'.'.join((*dst[0], dst[1]))}."
    if exists(catalog, *dst):
        raise ViewAlreadyExistsError(f"{move} View already exists")
    if catalog._pointer(*dst) is not None:
        raise TableAlreadyExistsError(f"{move} Table already exists")


def create(catalog: CatalogInternals, ns: tuple[str, ...], name: str, schema: Schema, version: ViewVersion,
           location: str | None, properties: dict[str, Any]) -> LoadedView:
    """Create a view (operation ``view-create``).

    Raises:
        NoSuchNamespaceError, ViewAlreadyExistsError, TableAlreadyExistsError (the name is a
        table's), InvalidLocationError (a folder outside the warehouse or another's).
    """
    from catalog.view_updates import check_version

    catalog._check_writable()
    check_version(version)
    catalog._require_namespace(ns)
    _free_name(catalog, ns, name)
    folder = catalog._resolve_table_location(location, "\x1f".join(ns), name)
    _check_folder(catalog, folder, (*ns, name))
    schema = Schema(*schema.fields, schema_id=0, identifier_field_ids=list(schema.identifier_field_ids))
    first = version.model_copy(update={"version_id": 1, "schema_id": 0})
    metadata = ViewMetadata(**{  # type: ignore[arg-type]
        "view-uuid": str(uuid.uuid4()), "format-version": VIEW_FORMAT_VERSION, "location": folder,
        "schemas": [schema], "current-version-id": 1, "versions": [first],
        "version-log": [ViewHistoryEntry(**{"timestamp-ms": first.timestamp_ms, "version-id": 1})],
        "properties": check_properties(properties, "view"),
    })
    metadata_location = _write(catalog, metadata, 0)
    with catalog._commit_lock:
        _free_name(catalog, ns, name)  # again, under the lock: a racing create lost
        _land(catalog, ns, name, "view-create", metadata_location, None, metadata)
    return LoadedView(metadata_location, metadata)


def register(catalog: CatalogInternals, ns: tuple[str, ...], name: str, metadata_location: str) -> LoadedView:
    """Register an existing view metadata file under ``ns.name`` (operation ``view-register``),
    as Iceberg's ``registerView``: the view's folder stays where the metadata says.

    Raises:
        NoSuchNamespaceError, ViewAlreadyExistsError, TableAlreadyExistsError (the name is a
        table's), InvalidLocationError (the file or the view's folder outside the warehouse, or
        another table's or view's folder), FileNotFoundError, ValueError (not view metadata).
    """
    from catalog.sandbox import InvalidLocationError

    catalog._check_writable()
    catalog._require_namespace(ns)
    _free_name(catalog, ns, name)
    if not catalog.files.inside(metadata_location):
        raise InvalidLocationError(
            f"metadata file {str(metadata_location)[:200]!r} must lie inside the catalog's warehouse")
    metadata = read_metadata(catalog, metadata_location)
    # The server writes the view's later metadata under its folder: it must be a folder this
    # view may own, and the registered file must lie in it (as a table's must).
    root = _check_folder(catalog, metadata.location, (*ns, name))
    real = catalog.files.canonical(metadata_location)  # either spelling, judged on the real path
    if real is None or not real.startswith(root.rstrip("/") + "/"):
        raise InvalidLocationError("metadata-location must lie under the view's own folder (its metadata location)")
    with catalog._commit_lock:
        _free_name(catalog, ns, name)  # again, under the lock: a racing create lost
        _land(catalog, ns, name, "view-register", metadata_location, None, metadata)
    return LoadedView(metadata_location, metadata)


def _land(catalog: CatalogInternals, ns: tuple[str, ...], name: str, operation: str, location: str | None,
          previous: str | None, metadata: ViewMetadata, deletes: tuple[bytes, ...] = (),
          puts: dict[bytes, bytes] | None = None) -> None:
    fields = {"namespace": ns, "table": name, "table_uuid": metadata.view_uuid, "metadata_location": location,
              "operation": operation, "data_change": False, "extra": {"kind": "view"}}
    writes = dict(puts or {})
    if location is not None:
        writes[keys.view_key(ns, name)] = _pointer_value(location, previous, metadata)
    catalog._land_many([(fields, writes, deletes)])


def drop(catalog: CatalogInternals, ns: tuple[str, ...], name: str) -> None:
    """Drop a view (its files stay, as a dropped table's do). Raises: NoSuchViewError."""
    catalog._check_writable()
    with catalog._commit_lock:
        pointer = _pointer(catalog, ns, name)
        if pointer is None:
            raise NoSuchViewError(f"View does not exist: {'.'.join((*ns, name))}")
        metadata = ViewMetadata.model_construct(view_uuid=pointer.get("view_uuid", ""))
        _land(catalog, ns, name, "view-drop", None, None, metadata, deletes=(keys.view_key(ns, name),))


def rename(catalog: CatalogInternals, src: tuple[tuple[str, ...], str], dst: tuple[tuple[str, ...], str]) -> None:
    """Rename a view (its folder stays). Raises: NoSuchViewError, NoSuchNamespaceError,
    ViewAlreadyExistsError / TableAlreadyExistsError for a taken destination."""
    catalog._check_writable()
    with catalog._commit_lock:
        pointer = _pointer(catalog, *src)
        if pointer is None:
            raise NoSuchViewError(f"View does not exist: {'.'.join((*src[0], src[1]))}")
        catalog._require_namespace(dst[0])
        _free_rename_target(catalog, src, dst)
        metadata = ViewMetadata.model_construct(view_uuid=pointer.get("view_uuid", ""))
        fields = {"namespace": dst[0], "table": dst[1], "table_uuid": metadata.view_uuid,
                  "metadata_location": pointer["metadata_location"], "operation": "view-rename",
                  "data_change": False, "extra": {"kind": "view", "renamed_from": ".".join((*src[0], src[1]))}}
        catalog._land_many([(fields, {keys.view_key(*dst): json.dumps(pointer).encode("utf-8")},
                             (keys.view_key(*src),))])


def replace(catalog: CatalogInternals, ns: tuple[str, ...], name: str, requirements: Sequence[Any],
            updates: Sequence[Any]) -> LoadedView:
    """Commit view updates (operation ``view-replace``): the REST spec's ``CommitViewRequest``.

    Raises:
        NoSuchViewError; CommitFailedException (a requirement failed, or a concurrent commit
        won); ViewUpdateError (an update the view cannot take).
    """

    catalog._check_writable()
    base = load(catalog, ns, name)
    for requirement in requirements:
        check_requirement(requirement, base.metadata)
    new = apply(base.metadata, updates)
    if new.location != base.metadata.location:
        _check_folder(catalog, new.location, (*ns, name))
    if new == base.metadata:
        return base
    location = _write(catalog, new, _version_of(base.metadata_location) + 1)
    with catalog._commit_lock:
        current = _pointer(catalog, ns, name)
        if current is None or current["metadata_location"] != base.metadata_location:
            raise CommitFailedException(f"View {'.'.join((*ns, name))} was changed by a concurrent commit; "
                                        "reload and retry")
        _land(catalog, ns, name, "view-replace", location, base.metadata_location, new)
    return LoadedView(location, new)
