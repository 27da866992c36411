"""Tables as the engine reads them: one ``load_table`` per table and metadata version.

A query names each of its tables several times on its way through Flight SQL (planning, the
binding key, the column origins, the native view, the run), and ``load_table`` validates the
table folder and builds a fresh FileIO each time: on a five-table TPC-H query at SF1 that was
tens of milliseconds of the server's time. What the engine reads from a table (schemas,
snapshots, manifests, the table's uuid and FileIO) is fixed by its metadata file, which never
changes, so a table is kept per metadata location and found again after one RocksDB read of
the table's pointer: a commit moves the pointer, and the next lookup loads the new version.

The tables handed out are shared between queries and threads: they are only read. Nothing
commits through them or switches their FileIO's fsync mode (appends and SQL writes load their
own). Planning itself (``QueryPlanner._pin_one``) still loads afresh, so a table whose
metadata file is gone fails there as everywhere else.
"""

from __future__ import annotations

from typing import Any

from catalog.lru import LockedLRU

_SIZE = 1024


class TableReads:
    """The current version of a table, loaded once per metadata location."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog
        self._tables: LockedLRU[tuple[tuple[str, ...], str], tuple[str, Any]] = LockedLRU(_SIZE)

    def load(self, namespace: tuple[str, ...], name: str) -> Any:
        """The table as ``load_table`` gives it now (raises what it raises), to be read only."""
        key = (namespace, name)
        locate = getattr(self._catalog, "metadata_location_of", None)
        if locate is not None:
            found = self._tables.get(key)
            if found is not None and found[0] == locate((*namespace, name)):
                return found[1]
        table = self._catalog.load_table((*namespace, name))
        self._tables.put(key, (table.metadata_location, table))
        return table
