"""Format v3 tables: read (deletion vectors, row lineage carried through), not written by icefloe.

pyiceberg 0.12 cannot write v3 data commits correctly (row-lineage fields of manifests and
snapshots, deletion vectors instead of position delete files), so every icefloe writer (DoPut
appends, ingest, SQL DML, compaction) refuses a v3 table up front with this error; other
engines' commits over the REST catalog are accepted as they come.
"""

from __future__ import annotations

from typing import Any


class UnsupportedFormatError(ValueError):
    """A write icefloe cannot make to a table of this format version (INVALID_ARGUMENT / 400)."""


def refuse_v3_write(metadata: Any, what: str = "write") -> None:
    """Raise ``UnsupportedFormatError`` for a table of format version 3 or later."""
    version = int(getattr(metadata, "format_version", 2))
    if version >= 3:
        raise UnsupportedFormatError(
            f"{what}: the table is Iceberg format v{version}; icefloe reads v{version} tables but cannot "
            "write them yet (write with an engine that supports v3, e.g. Spark over the REST catalog)"
        )
