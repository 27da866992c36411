"""Listing and deleting a table folder's files for orphan removal, on disk or object storage.

Orphan removal compares what a folder holds with what the table references. A local folder
is walked; an object-store "folder" is listed by prefix (``ListObjectsV2`` through the
table's own Arrow filesystem, so the same endpoint and keys as its FileIO). Locations come
out in ``maintenance_worker.local_path`` form (what the reference sets hold), each with its
last-modified time in seconds since the epoch: the store's clock for objects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow.fs as pafs
from pyiceberg.io import FileIO

from catalog.durable_io import remove
from catalog.maintenance_worker import local_path
from catalog.object_store import filesystem, fs_path, is_object_store


def folder_key(location: str) -> str:
    """A table location in the form file locations are compared in."""
    return local_path(location).rstrip("/")


def list_files(io: FileIO, location: str) -> Iterator[tuple[str, float]]:
    """(file location, modified time) of every file under the table folder ``location``."""
    root = folder_key(location)
    if not is_object_store(location):
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    yield path, os.stat(path).st_mtime
                except FileNotFoundError:
                    continue
        return
    fs = filesystem(io, location)
    # The trailing "/" keeps a sibling folder that shares the name's start ("t" and "t2") out.
    selector = pafs.FileSelector(fs_path(root) + "/", recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or info.mtime is None:
            continue
        yield f"s3://{info.path}", info.mtime.timestamp()


def delete_file(io: FileIO, location: str) -> None:
    """Delete one listed file through the table's FileIO (which refuses anything outside
    the table's folder).

    Raises:
        FileNotFoundError: It is gone already.
        OutsideTableError: It lies outside the table's folder.
    """
    remove(io, location)
