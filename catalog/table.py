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

from catalog.metadata_ops import apply_updates


class FastTransaction(Transaction):
    _memo: tuple[int, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        memo = self._memo
        if memo is not None and memo[0] == len(self._updates):
            return memo[1]
        metadata = apply_updates(self._table.metadata, self._updates, None, creating=False)
        self._memo = (len(self._updates), metadata)
        return metadata


class RocksTable(Table):
    """A pyiceberg ``Table`` whose transactions skip needless deep copies."""

    def transaction(self) -> Transaction:
        return FastTransaction(self)
