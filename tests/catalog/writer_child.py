"""Child process for test_read_only.py: holds a warehouse read-write and obeys stdin commands.

Commands, one per line: ``append FIRST COUNT`` (append ids FIRST..FIRST+COUNT-1 to ns.t),
``namespace NAME``, ``exit``. Each command is answered with one line: the commit-log head.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from catalog import RocksCatalog

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def main(warehouse: str) -> None:
    cat = RocksCatalog("writer", warehouse=warehouse, **{"read-only": "false"})
    cat.create_namespace_if_not_exists("ns")
    table = cat.create_table_if_not_exists("ns.t", SCHEMA)
    print(cat.log.head(), flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "append":
            first, count = int(args[0]), int(args[1])
            ids = range(first, first + count)
            table.append(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}, schema=SCHEMA))
        elif command == "namespace":
            cat.create_namespace(args[0])
        elif command == "exit":
            break
        print(cat.log.head(), flush=True)
    cat.close()


if __name__ == "__main__":
    main(sys.argv[1])
