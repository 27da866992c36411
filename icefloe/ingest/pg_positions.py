"""Positions of the Postgres CDC connector in its checkpoint, and the snapshot's visibility.

A stream position is ``wal:<end LSN of the last transaction taken, hex>`` (``.n`` inside a unit:
never a checkpoint), plus, while it still matters, the initial snapshot's visibility as JSON:
stream transactions the snapshot already saw are skipped (``visible``).
"""

from __future__ import annotations

import json
from typing import Any


def encode_wal(lsn: int, seen: dict[str, Any] | None, inside: int | None = None) -> str:
    """A stream position: ``wal:<end LSN, hex>`` (``.n``: inside a transaction, never a
    checkpoint), and while it matters, `` `` + the snapshot's visibility as JSON."""
    text = f"wal:{lsn:016X}" + (f".{inside}" if inside is not None else "")
    return text + (" " + json.dumps(seen, separators=(",", ":")) if seen is not None else "")


def decode_wal(position: str) -> tuple[int, dict[str, Any] | None]:
    head, _, seen = position[4:].partition(" ")
    return int(head.split(".")[0], 16), (json.loads(seen) if seen else None)


def visible(xid: int, seen: dict[str, Any]) -> bool:
    """Whether transaction ``xid`` (32 bits, as the stream gives it) committed before the snapshot
    ``seen`` was taken (its xmin / xmax / in-progress list are 64-bit: compared modulo 2^32)."""

    def precedes(a: int, b: int) -> bool:
        return ((a - b) & 0xFFFFFFFF) >= 0x80000000

    xmin, xmax = seen["xmin"] & 0xFFFFFFFF, seen["xmax"] & 0xFFFFFFFF
    if precedes(xid, xmin):
        return True
    if not precedes(xid, xmax):
        return False
    return xid not in {x & 0xFFFFFFFF for x in seen["xip"]}
