"""Table and transaction classes that keep pyiceberg's commit path flat.

pyiceberg's ``Transaction.table_metadata`` re-applies every staged update to the table
metadata *and deep-copies the result* on each access — about twenty times per append — so an
append's cost grows with the number of snapshots. Metadata objects are immutable in practice
(every update function returns ``model_copy(update=...)``), so ``FastTransaction`` applies the
updates without the deep copy and memoises the result until more updates are staged.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate

from catalog.metadata_ops import apply_updates


class FastTransaction(Transaction):
    # (base metadata, staged updates, result). Both inputs are compared by identity: the
    # updates tuple is replaced (never mutated) when updates are staged or rebuilt, and a
    # retry refreshes the table, which replaces its metadata object.
    _memo: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base = self._table.metadata
        memo = self._memo
        if memo is not None and memo[0] is base and memo[1] is self._updates:
            return memo[2]
        metadata = apply_updates(base, self._updates, None, creating=False)
        self._memo = (base, self._updates, metadata)
        return metadata


class RocksTable(Table):
    """A pyiceberg ``Table`` whose transactions skip needless deep copies."""

    def transaction(self) -> Transaction:
        # Appends, overwrites and deletes write data files before they commit: on a read-only
        # catalog refuse up front rather than leave unreferenced files behind.
        check_writable = getattr(self.catalog, "check_writable", None)
        if check_writable is not None:
            check_writable()
        return FastTransaction(self)
