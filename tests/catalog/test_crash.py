"""SIGKILL a process that appends in a loop, many times; every reopen must be consistent.

After each kill: opening succeeds, every commit the child acknowledged is in the log with its
snapshot, the log is contiguous, every table pointer's metadata file and every manifest list,
manifest and data file it references exist, and a scan returns exactly the rows of the
append records in the log.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from catalog_testlib import missing_files
from crash_child import ROWS

from catalog import RocksCatalog, keys

ITERATIONS = 30
MIN_ITERATIONS = 10  # always run, however loaded the machine
TIME_BUDGET_S = 30.0  # more cycles, up to ITERATIONS, while within it
ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")


def _run_and_kill(warehouse: Path, rng: random.Random) -> list[dict[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(warehouse)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    acks: list[bytes] = []
    try:
        ready = proc.stdout.readline()
        if ready.strip() != b"ready":
            raise AssertionError(f"child did not start: {ready!r}")
        # Let it land a random number of commits (0: kill inside the first append), then
        # kill at a random point of the next one.
        for _ in range(rng.randint(0, 6)):
            acks.append(proc.stdout.readline())
        time.sleep(rng.uniform(0.0, 0.012))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")
    # Only complete lines were acknowledged; a torn last line is not an acknowledgement.
    lines = [*acks, *out.split(b"\n")]
    return [json.loads(line) for line in lines if line.strip().endswith(b"}")]


def _check(warehouse: Path, acknowledged: dict[int, int]) -> int:
    cat = RocksCatalog("check", warehouse=str(warehouse))
    try:
        head = cat.log.head()
        records = list(cat.log.read(0))
        assert [r.seq for r in records] == list(range(1, head + 1)), "commit log is not contiguous"
        by_seq = {r.seq: r for r in records}
        for seq, snapshot_id in acknowledged.items():
            assert seq in by_seq, f"acknowledged commit {seq} is missing"
            assert by_seq[seq].snapshot_id == snapshot_id
        for key, _ in cat.store.scan(keys.TABLE):
            ns, name = keys.decode_table_key(key)
            table = cat.load_table((*ns, name))
            assert missing_files(table) == [], f"{name} references missing files"
        table = cat.load_table("ns.t")
        appends = [r for r in records if r.operation == "append"]
        expected = sorted(i for r in appends for i in range(r.seq * ROWS, r.seq * ROWS + ROWS))
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == expected
        current = table.current_snapshot()
        assert (current.snapshot_id if current else None) == (appends[-1].snapshot_id if appends else None)
        return head
    finally:
        cat.close()


def test_sigkill_while_appending(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    rng = random.Random(int(os.environ.get("ICEFLOE_CRASH_SEED", "20261129")))
    acknowledged: dict[int, int] = {}
    started = time.monotonic()
    iterations = 0
    while iterations < MIN_ITERATIONS or (iterations < ITERATIONS and time.monotonic() - started < TIME_BUDGET_S):
        for ack in _run_and_kill(warehouse, rng):
            acknowledged[ack["seq"]] = ack["snapshot_id"]
        _check(warehouse, acknowledged)
        iterations += 1
    assert len(acknowledged) >= iterations, "the child acknowledged too few commits to mean anything"
