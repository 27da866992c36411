"""icefloe's catalog of record: Iceberg tables whose pointers and commit log live in RocksDB."""

from catalog.commit_log import CommitLog, CommitRecord, CursorExpiredError
from catalog.context import CommitContext, commit_context, current_commit_context
from catalog.names import EmptyNamespaceError, InvalidNameError
from catalog.rocks_catalog import CatalogReadOnlyError, MetadataFileMissingError, RocksCatalog
from catalog.subscriptions import CommitHub, Subscription, TooManySubscribersError

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
