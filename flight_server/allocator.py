"""Allocator settings the server process needs before pyarrow loads.

Arrow allocates through its bundled mimalloc (v3 in pyarrow 26), which reads its options from
the environment once, when ``libarrow`` is loaded. By default it hands freed memory back to the
OS after 1 s. A scan decodes whole row groups into column buffers of many MiB, each a fresh
mimalloc page, so a server whose scans come a few seconds apart faults fresh (huge, zeroed)
pages in for every scan: measured on a 10M-row ``SELECT *`` in bench_flightsql_scan's
rotation, ~6,800 page faults per scan and 2-5% of the server's CPU in the kernel zeroing
pages. Keeping freed memory for 10 s lets a busy server reuse it (~30 faults per scan) and
still returns it once the server is idle.

Only the server's own entry point imports this module; an operator's own ``MIMALLOC_*``
settings win (``setdefault``).
"""

from __future__ import annotations

import os

PURGE_DELAY_MS = "10000"

os.environ.setdefault("MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS)
