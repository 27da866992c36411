"""icefloe's catalog of record: Iceberg tables whose pointers and commit log live in RocksDB.

The names below are imported on first use: ``RocksCatalog`` pulls in pyiceberg and rocksdict
(seconds on a loaded machine), and a remote client that only needs a light module of this
package (``catalog.key_rules``, ``catalog.pipes``) must not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from catalog.catalog_errors import CatalogReadOnlyError, MetadataFileMissingError
    from catalog.commit_log import CommitLog, CommitRecord, CursorExpiredError
    from catalog.context import CommitContext, commit_context, current_commit_context
    from catalog.names import EmptyNamespaceError, InvalidNameError
    from catalog.rocks_catalog import RocksCatalog
    from catalog.subscriptions import CommitHub, Subscription, TooManySubscribersError

_HOMES = {
    "CommitLog": "catalog.commit_log",
    "CommitRecord": "catalog.commit_log",
    "CursorExpiredError": "catalog.commit_log",
    "CommitContext": "catalog.context",
    "commit_context": "catalog.context",
    "current_commit_context": "catalog.context",
    "EmptyNamespaceError": "catalog.names",
    "InvalidNameError": "catalog.names",
    "CatalogReadOnlyError": "catalog.catalog_errors",
    "RocksCatalog": "catalog.rocks_catalog",
    "MetadataFileMissingError": "catalog.catalog_errors",
    "CommitHub": "catalog.subscriptions",
    "Subscription": "catalog.subscriptions",
    "TooManySubscribersError": "catalog.subscriptions",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value

__all__ = [
    "CatalogReadOnlyError",
    "CommitContext",
    "CommitHub",
    "CommitLog",
    "CommitRecord",
    "CursorExpiredError",
    "EmptyNamespaceError",
    "InvalidNameError",
    "MetadataFileMissingError",
    "RocksCatalog",
    "Subscription",
    "TooManySubscribersError",
    "commit_context",
    "current_commit_context",
]
