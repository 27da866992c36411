"""Compaction drops the delete files it makes unneeded.

A compaction rewrites data files with their deletes applied; the new files get the commit's
sequence number, so no older delete file can ever apply to them (nor to any later file).
A delete file is therefore still needed only if it applies to a data file that stays live:
every other one (those that applied only to rewritten files, and those left pointing at
files an earlier commit removed) is dropped from the new snapshot. Older snapshots keep
them (time travel); expiry and orphan removal delete the files later.

pyiceberg's overwrite producer handles data manifests only: a delete manifest that held a
removed file would be rewritten as a *data* manifest. ``DroppingOverwrite`` keeps pyiceberg's
handling of data files and rewrites each affected delete manifest itself (EXISTING entries
for the kept delete files, DELETED entries for the dropped ones, content DELETES), and its
summary counts the dropped files (``removed-delete-files``, ``removed-position-deletes``...).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from catalog.delete_writer import _DeleteManifestWriter
from catalog.deletes import plan_files, read_delete_manifest


def unneeded_delete_files(metadata: TableMetadata, io: FileIO, snapshot: Snapshot,
                          removed: Iterable[str]) -> list[DataFile]:
    """The delete files of ``snapshot`` that apply to no data file left live once the
    ``removed`` data files are gone (format v2: v3 tables are not compacted by icefloe)."""
    gone = set(removed)
    needed: set[str] = set()
    for planned in plan_files(metadata, io, snapshot.snapshot_id):
        if planned.data_file.file_path not in gone:
            needed.update(f.file_path for f in planned.deletes.files())
    found: dict[str, DataFile] = {}
    for manifest in snapshot.manifests(io):
        if manifest.content == ManifestContent.DELETES:
            for entry in read_delete_manifest(io, manifest):
                if entry.data_file.file_path not in needed:
                    found[entry.data_file.file_path] = entry.data_file
    return list(found.values())


class DroppingOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite that also drops delete files (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dropped: dict[str, DataFile] = {}

    def drop_delete_file(self, delete_file: DataFile) -> None:
        self._dropped[delete_file.file_path] = delete_file

    def _existing_manifests(self) -> list[ManifestFile]:
        kept = []
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES or not self._dropped:
                kept.append(manifest)
                continue
            entries = list(manifest.fetch_manifest_entry(io=self._io, discard_deleted=True))
            if not any(e.data_file.file_path in self._dropped for e in entries):
                kept.append(manifest)
                continue
            metadata = self._transaction.table_metadata
            with _DeleteManifestWriter(self.spec(manifest.partition_spec_id), metadata.schema(),
                                       self.new_manifest_output(), self._snapshot_id,
                                       self._compression) as writer:
                for entry in entries:
                    if entry.data_file.file_path in self._dropped:
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            kept.append(writer.to_manifest_file())
        return kept

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        # The dropped delete files are counted as removed files (pyiceberg's collector counts
        # a removed file by its content), for this call only: pyiceberg's own manifest
        # handling must not see them among the removed *data* files.
        added = [f for f in self._dropped.values() if f not in self._deleted_data_files]
        self._deleted_data_files.update(added)
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._deleted_data_files.difference_update(added)
