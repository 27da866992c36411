"""Child process for test_pipe_crash.py: run ``icefloe.pipe`` once, SIGKILLing itself at a chosen point.

    python pipe_child.py LAKE KILL_POINT N

LAKE is ``local:<warehouse>`` or ``remote:<uri>``. KILL_POINT: ``none``; ``transform`` (the
N-th transform has produced its rows, nothing is committed yet); ``commit`` (inside the N-th
commit: its files are durable, the catalog batch is not written); ``after-commit`` (the N-th
catalog batch is durable, the pipe has not seen the answer). Fault injection wraps the catalog's
own functions in this child only; nothing is replaced.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pyarrow as pa

import icefloe


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(target: str, point: str, n: int) -> None:
    kind, _, where = target.partition(":")
    lake = icefloe.open(where) if kind == "local" else icefloe.connect(where)
    calls = {"transform": 0, "commit": 0, "after-commit": 0}

    def transform(rows: pa.Table) -> pa.Table:
        out = pa.table({"id": rows["id"], "v": rows["v"]})
        calls["transform"] += 1
        if point == "transform" and calls["transform"] == n:
            _die()
        return out

    if point == "commit":
        import catalog.append as append_module

        fsync_all = append_module.fsync_all

        def fsync_then_die(paths: Any) -> None:
            fsync_all(paths)
            calls["commit"] += 1
            if calls["commit"] == n:
                _die()

        append_module.fsync_all = fsync_then_die  # type: ignore[assignment]
    if point == "after-commit":
        from catalog import keys
        from catalog.store import RocksStore

        write = RocksStore.write

        def write_then_die(self: RocksStore, puts: Any, *args: Any, **kwargs: Any) -> Any:
            result = write(self, puts, *args, **kwargs)
            if keys.HEAD_SEQ in puts:
                calls["after-commit"] += 1
                if calls["after-commit"] == n:
                    _die()
            return result

        RocksStore.write = write_then_die  # type: ignore[method-assign]
    stats = icefloe.pipe(source=lake.table("ns.src"), transform=transform, sink=lake.table("ns.dst"),
                         checkpoint="crashy", columns={"v": ["v"]}, once=True, max_commits=2)
    sys.stdout.write(f"done {stats.checkpoint} {stats.commits}\n")
    lake.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
