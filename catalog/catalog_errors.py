"""Errors of ``RocksCatalog`` that its parts (views, table commits) raise too."""

from __future__ import annotations

from pyiceberg.exceptions import ForbiddenError, NoSuchTableError


class CatalogReadOnlyError(ForbiddenError):
    """A write was attempted on a catalog opened read-only."""


class MetadataFileMissingError(NoSuchTableError):
    """The catalog points a table at a metadata file that is gone (deleted by hand, or lost
    with its storage). The table is listed and can be dropped, but not loaded. The message is
    Iceberg-Java's for the same case; the location is no secret (every load answer holds it)."""

    def __init__(self, location: str) -> None:
        super().__init__(f"Failed to open input stream for file: {location}")
        self.location = location
