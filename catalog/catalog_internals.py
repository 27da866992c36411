"""What the parts of ``RocksCatalog`` (table commits, views, namespaces) use of the catalog.

They are functions over the catalog rather than methods of it, to keep each module small; this
Protocol names what they need so that they do not import ``catalog.rocks_catalog`` (which
imports them). ``RocksCatalog`` satisfies it; mypy checks that at every call.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from pyiceberg.catalog import PropertiesUpdateSummary
from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from catalog.commit_log import CommitRecord
from catalog.commit_writer import Commit, TablePointer
from catalog.pins import SnapshotPins
from catalog.sandbox import ConfinedFileIO, Warehouse
from catalog.store import RocksStore


class CatalogInternals(Protocol):
    warehouse: str
    files: Warehouse
    pins: SnapshotPins
    _commit_lock: threading.Lock
    _metadata_cache: dict[tuple[tuple[str, ...], str], tuple[str, TableMetadata]]

    @property
    def store(self) -> RocksStore: ...

    def _check_writable(self) -> None: ...

    def _refresh(self) -> None: ...

    def _namespace(self, namespace: str | Identifier, err: type[Exception] = ...) -> tuple[str, ...]: ...

    def _split(self, identifier: str | Identifier, err: type[Exception] = ...) -> tuple[tuple[str, ...], str]: ...

    def _ns_exists(self, ns: tuple[str, ...]) -> bool: ...

    def _require_namespace(self, ns: tuple[str, ...]) -> None: ...

    def _pointer(self, ns: tuple[str, ...], table: str) -> TablePointer | None: ...

    def _pointer_value(self, location: str, previous: str | None, table_uuid: str) -> bytes: ...

    def _refuse_view_name(self, ns: tuple[str, ...], name: str) -> None: ...

    def _read_metadata(self, ns: tuple[str, ...], table: str, location: str, verify: bool = False) -> TableMetadata: ...

    def _empty_table_metadata(self) -> TableMetadata: ...

    def _parse_metadata_version(self, metadata_location: str) -> int: ...

    def _land(
        self, record_fields: dict[str, Any], puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = ()
    ) -> CommitRecord: ...

    def _land_many(self, commits: list[Commit]) -> list[CommitRecord]: ...

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO: ...

    def _resolve_table_location(self, location: str | None, database_name: str, table_name: str) -> str: ...

    def _get_updated_props_and_update_summary(
        self, current_properties: Properties, removals: set[str] | None, updates: Properties
    ) -> tuple[PropertiesUpdateSummary, Properties]: ...

    def table_root(self, location: str, identifier: tuple[str, ...] | None = None) -> str: ...

    def table_io(self, table_location: str) -> ConfinedFileIO: ...

    def confined_io(self, root: str) -> ConfinedFileIO: ...

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]: ...

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]: ...

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties: ...
