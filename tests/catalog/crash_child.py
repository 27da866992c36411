"""Child process for test_crash.py: append to one table forever, acknowledging each commit.

Says ``ready`` once the table exists, then one JSON message per landed commit (sent before the
next append starts): ``{"seq": N, "snapshot_id": S}``; on stdout, one line each, when run as a
script, or over a pipe when test_crash.py forks it (``append_forever``). The rows of the commit with
sequence N have ids ``N * ROWS ... N * ROWS + ROWS - 1`` so the parent can check exactly which
rows must exist after a crash. The parent kills this process with SIGKILL.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection

import pyarrow as pa

from catalog import RocksCatalog

ROWS = 10
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def append_forever(warehouse: str, acks: Connection) -> None:
    """The loop of ``main``, each message sent over ``acks`` (one ``send_bytes`` a message)."""
    main(warehouse, lambda text: acks.send_bytes(text.encode()))


def main(warehouse: str, say: Callable[[str], None] = lambda text: print(text, flush=True)) -> None:
    cat = RocksCatalog("crash", warehouse=warehouse)
    cat.create_namespace_if_not_exists("ns")
    table = cat.create_table_if_not_exists("ns.t", SCHEMA)
    say("ready")
    while True:
        seq = cat.log.head() + 1  # the only writer: this is the sequence the append will get
        ids = range(seq * ROWS, seq * ROWS + ROWS)
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"r{i}" for i in ids]}, schema=SCHEMA))
        record = cat.log.get(cat.log.head())
        assert record is not None and record.seq == seq
        say(json.dumps({"seq": record.seq, "snapshot_id": record.snapshot_id}))


if __name__ == "__main__":
    main(sys.argv[1])
