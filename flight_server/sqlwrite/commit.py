"""Committing a SQL write's transaction: once, as staged."""

from __future__ import annotations

from typing import Any


def commit_once(txn: Any) -> None:
    """Commit a transaction exactly as staged, or raise ``CommitFailedException``.

    pyiceberg's own retry re-bases the staged snapshot onto the new head and validates only
    that no data files were *added* meanwhile; a concurrent commit that *removed* files (a
    DELETE) would be silently undone by a rebased copy-on-write rewrite. So its retry is
    switched off (it retries only when snapshot producers are registered) and the whole
    statement is run again on the new snapshot instead (``SqlWriter.run``).
    """
    txn._snapshot_producers.clear()
    txn.commit_transaction()
