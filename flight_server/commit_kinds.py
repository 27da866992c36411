"""What kind of change a commit-log record is, for counting and showing it.

Kept apart from the catalog's own description of a commit (``catalog.metadata_ops``): this only
reads what a record says, with whatever fields the record has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from catalog.commit_log import CommitRecord

# Operations that never change a row a reader sees (compaction is ``replace``).
NO_DATA_CHANGE = frozenset({"replace", "expire", "schema", "properties", "rename"})


def is_maintenance(record: CommitRecord) -> bool:
    """Whether ``record`` changed no row a reader sees (compaction, expiry, metadata only).

    A record's own ``data_change`` flag decides when it has one (as a field or in ``extra``);
    else a ``maintenance`` mark in ``extra`` or an operation that never changes rows.
    """
    data_change = getattr(record, "data_change", None)
    if data_change is None:
        data_change = record.extra.get("data_change")
    if isinstance(data_change, bool):
        return not data_change
    return bool(record.extra.get("maintenance")) or record.operation in NO_DATA_CHANGE
