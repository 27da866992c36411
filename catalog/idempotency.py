"""Exactly-once appends: idempotency keys stored in the same RocksDB batch as the commit.

A writer that sends ``x-icefloe-idempotency-key`` gets its first result back on every retry
with that key and table, also after a crash: the key -> result record is written by the
catalog's ``_land`` in the very batch that moves the table pointer (through
``extra_batch_writes``), so a key exists exactly when its commit landed.

Keys are kept for a retention window (``DEFAULT_RETENTION_S``); ``expire`` drops older ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from catalog import keys
from catalog.commit_log import CommitRecord
from catalog.key_rules import MAX_KEY_LENGTH as MAX_KEY_LENGTH
from catalog.key_rules import check_key as check_key
from catalog.store import RocksStore

DEFAULT_RETENTION_S = 7 * 24 * 3600.0

BatchExtras = Callable[[CommitRecord], dict[bytes, bytes]]

_extras: contextvars.ContextVar[BatchExtras | None] = contextvars.ContextVar("icefloe_batch_extras", default=None)


@contextlib.contextmanager
def extra_batch_writes(fn: BatchExtras) -> Iterator[None]:
    """Within the block, the catalog adds ``fn(record)`` to the batch of each commit it lands."""
    token = _extras.set(fn)
    try:
        yield
    finally:
        _extras.reset(token)


def batch_extras(record: CommitRecord) -> dict[bytes, bytes]:
    """Extra key/values for the commit batch of ``record`` (called by ``RocksCatalog._land``)."""
    fn = _extras.get()
    return fn(record) if fn is not None else {}


def idempotency_key(namespace: tuple[str, ...], table: str, key: str) -> bytes:
    return (
        keys.IDEMPOTENCY + keys.encode_namespace(namespace) + b"\x00" + table.encode("utf-8") + b"\x00" + key.encode()
    )


def encode_result(result: dict[str, Any]) -> bytes:
    return json.dumps({**result, "stored_at": time.time()}, separators=(",", ":")).encode("utf-8")


class IdempotencyStore:
    """Lookup and retention of stored first results."""

    def __init__(self, store: RocksStore, retention_s: float = DEFAULT_RETENTION_S) -> None:
        self._store = store
        self.retention_s = retention_s

    def get(self, namespace: tuple[str, ...], table: str, key: str) -> dict[str, Any] | None:
        """The first result stored for ``key`` on this table, if still retained."""
        raw = self._store.get(idempotency_key(namespace, table, key))
        if raw is None:
            return None
        body: dict[str, Any] = json.loads(raw)
        if time.time() - float(body.get("stored_at", 0)) > self.retention_s:
            return None
        body.pop("stored_at", None)
        return body

    def expire(self, now: float | None = None) -> int:
        """Delete keys older than the retention window; return how many were removed."""
        cutoff = (now if now is not None else time.time()) - self.retention_s
        stale = [
            key
            for key, raw in self._store.scan(keys.IDEMPOTENCY)
            if float(json.loads(raw).get("stored_at", 0)) < cutoff
        ]
        if stale:
            self._store.write({}, tuple(stale))
        return len(stale)
