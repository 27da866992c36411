"""Child process for test_crash.py: append to one table forever, acknowledging each commit.

Prints ``ready`` once the table exists, then one JSON line per landed commit (flushed before
the next append starts): ``{"seq": N, "snapshot_id": S}``. The rows of the commit with
sequence N have ids ``N * ROWS ... N * ROWS + ROWS - 1`` so the parent can check exactly which
rows must exist after a crash. The parent kills this process with SIGKILL.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from catalog import RocksCatalog

ROWS = 10
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def main(warehouse: str) -> None:
    cat = RocksCatalog("crash", warehouse=warehouse)
    cat.create_namespace_if_not_exists("ns")
    table = cat.create_table_if_not_exists("ns.t", SCHEMA)
    print("ready", flush=True)
    while True:
        seq = cat.log.head() + 1  # the only writer: this is the sequence the append will get
        ids = range(seq * ROWS, seq * ROWS + ROWS)
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"r{i}" for i in ids]}, schema=SCHEMA))
        record = cat.log.get(cat.log.head())
        assert record is not None and record.seq == seq
        print(json.dumps({"seq": record.seq, "snapshot_id": record.snapshot_id}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
