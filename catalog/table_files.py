"""Checks that a table's metadata names only files under the table's own folder.

A table's metadata is a web of locations a client chose: the table location, location
properties, manifest lists, manifests, data and delete files, statistics files, old metadata
files in the metadata log. The server later reads, rewrites and deletes what they name, so
before any metadata lands (create, register, every commit, REST or in-process) each location
it *adds* is checked here against the table's folder. What a landed metadata already held was
checked when it landed; a commit therefore reads only its new manifest lists and manifests.

Every refusal is an ``InvalidLocationError`` (400 / ``INVALID_ARGUMENT``): the client sent a
bad commit, and nothing of it lands.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyiceberg.manifest import ManifestFile

from catalog.lru import LockedLRU
from catalog.sandbox import ConfinedFileIO, InvalidLocationError, Warehouse

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

logger = logging.getLogger("icefloe.catalog")

# Table properties that name folders the server writes into.
LOCATION_PROPERTIES: tuple[str, ...] = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
# Properties that would choose the FileIO (its class, its endpoint) if taken from a table: a
# table may not set them (the catalog's own FileIO properties apply to every table).
FORBIDDEN_TABLE_PROPERTIES: tuple[str, ...] = ("py-io-impl",)


# Manifests this process wrote itself (fast appends), by location -> the data files they name:
# a commit's check reads these paths instead of decoding the Avro file it has just written
# (a third of a small append's check). Only our own writers put entries here.
_WRITTEN: LockedLRU[str, tuple[str, ...]] = LockedLRU(1024)


def remember_manifest(location: str, data_files: Iterable[str]) -> None:
    """Record the data files of a manifest this process has just written."""
    _WRITTEN.put(location, tuple(data_files))


def check_properties(warehouse: Warehouse, root: str, properties: dict[str, str]) -> None:
    """Location properties must lie under the table's folder; FileIO choices are refused.

    Raises:
        InvalidLocationError: A property names a place outside, or picks the FileIO.
    """
    for key in FORBIDDEN_TABLE_PROPERTIES:
        if key in properties:
            raise InvalidLocationError(f"table property {key!r} cannot be set: the catalog chooses the FileIO")
    for key in LOCATION_PROPERTIES:
        value = properties.get(key)
        if value is not None:
            warehouse.check_under(value, root, f"table property {key}")


def _check_snapshot(io: ConfinedFileIO, warehouse: Warehouse, root: str, snapshot: Snapshot,
                    known_manifests: set[str]) -> None:
    warehouse.check_under(snapshot.manifest_list, root, f"snapshot {snapshot.snapshot_id}'s manifest list")
    manifests: Iterable[ManifestFile] = snapshot.manifests(io)
    for manifest in manifests:
        if manifest.manifest_path in known_manifests:
            continue
        warehouse.check_under(manifest.manifest_path, root, "manifest")
        known_manifests.add(manifest.manifest_path)
        written = _WRITTEN.get(manifest.manifest_path)
        paths = written if written is not None else (
            entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=False))
        for path in paths:
            warehouse.check_under(path, root, "data file")


def check_metadata(io: ConfinedFileIO, new: TableMetadata, base: TableMetadata | None,
                   metadata_location: str | None = None) -> None:
    """Check what ``new`` adds over ``base`` (everything, without a base).

    Args:
        io: The table's FileIO, confined to its folder's real path (``io.root``); it reads
            the new manifest lists and manifests.
        new: The metadata about to land.
        base: The metadata it replaces, already checked; None for a create or register.
        metadata_location: The new metadata file's own location, when known.

    Raises:
        InvalidLocationError: ``new`` names a file outside the table's folder.
    """
    warehouse, root = io.warehouse, io.root
    assert root is not None, "a table's FileIO is confined to its folder"
    check_properties(warehouse, root, dict(new.properties))
    if metadata_location is not None:
        warehouse.check_under(metadata_location, root, "metadata file")
    old_logs = {e.metadata_file for e in base.metadata_log} if base is not None else set()
    for entry in new.metadata_log:
        if entry.metadata_file not in old_logs:
            warehouse.check_under(entry.metadata_file, root, "metadata log entry")
    old_stats = {s.statistics_path for s in base.statistics} if base is not None else set()
    for stats in new.statistics:
        if stats.statistics_path not in old_stats:
            warehouse.check_under(stats.statistics_path, root, "statistics file")
    old_part_stats = {s.statistics_path for s in base.partition_statistics} if base is not None else set()
    for part_stats in new.partition_statistics:
        if part_stats.statistics_path not in old_part_stats:
            warehouse.check_under(part_stats.statistics_path, root, "partition statistics file")
    old_snapshots = {s.snapshot_id: s.manifest_list for s in base.snapshots} if base is not None else {}
    known_manifests: set[str] = set()
    if base is not None and base.location == new.location:
        # Manifests the base already holds were checked when it landed.
        for snapshot in base.snapshots:
            if snapshot.snapshot_id == getattr(base, "current_snapshot_id", None):
                known_manifests.update(m.manifest_path for m in snapshot.manifests(io))
    for snapshot in new.snapshots:
        if base is not None and base.location == new.location and \
                old_snapshots.get(snapshot.snapshot_id) == snapshot.manifest_list:
            continue
        _check_snapshot(io, warehouse, root, snapshot, known_manifests)


def purge(table: Table) -> None:
    """Delete a dropped table's files: those its metadata names (data and delete files,
    manifests, manifest lists, metadata and statistics files), through its confined FileIO, so
    a file named outside the table's folder is logged and left alone, never deleted."""
    io = table.io
    metadata = table.metadata
    doomed: list[str] = []
    seen_manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        try:
            manifests = snapshot.manifests(io)
        except OSError as exc:
            logger.warning("purge of %s: cannot read manifest list: %s", table.name(), exc)
            continue
        for manifest in manifests:
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            try:
                entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
                doomed.extend(e.data_file.file_path for e in entries)
            except OSError as exc:
                logger.warning("purge of %s: cannot read a manifest: %s", table.name(), exc)
        doomed.append(snapshot.manifest_list)
    doomed.extend(seen_manifests)
    doomed.extend(log.metadata_file for log in metadata.metadata_log)
    doomed.extend(s.statistics_path for s in metadata.statistics)
    doomed.append(table.metadata_location)
    for path in dict.fromkeys(doomed):
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("purge of %s: %s not deleted: %s", table.name(), str(path)[:200], exc)
