"""The rule for idempotency keys, apart from their storage (``catalog.idempotency``), so that
clients can check a key before sending it without importing RocksDB."""

from __future__ import annotations

MAX_KEY_LENGTH = 256


def check_key(key: str) -> str:
    """Validate an idempotency key; raises ValueError with a user-facing message."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"idempotency key must be 1 to {MAX_KEY_LENGTH} characters long")
    if any(ord(c) < 0x20 for c in key):
        raise ValueError("idempotency key must not contain control characters")
    return key
