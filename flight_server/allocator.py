"""Allocator settings the server process needs before pyarrow loads.

Arrow allocates through its bundled mimalloc, which reads its options from the environment
once, when ``libarrow`` is loaded. By default mimalloc hands freed memory back to the OS after
10 ms, so a long scan that frees and reallocates its batches faults fresh (huge, zeroed) pages
in again and again: measured on a 10M-row ``SELECT *``, ~6,800 page faults per scan and ~4% of
the server's CPU (8% of a 4-way split scan's) in the kernel zeroing pages. Keeping freed memory
for 10 s lets a busy server reuse it (30 faults per scan) and still returns it once idle.

Only the server's own entry point imports this module; an operator's own ``MIMALLOC_*``
settings win (``setdefault``).
"""

from __future__ import annotations

import os

PURGE_DELAY_MS = "10000"

os.environ.setdefault("MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS)
