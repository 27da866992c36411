"""kill -9 of a pipe between transform and commit, inside the commit and right after it: every
source row reaches the sink exactly once after a restart."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from servers import ROOT, ServerProcess

import icefloe

CHILD = Path(__file__).resolve().parent / "pipe_child.py"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])
COMMITS, ROWS = 12, 5


def _fill(lake: icefloe.Lake) -> None:
    lake.create_namespace("ns")
    source = lake.create_table("ns.src", schema=SCHEMA)
    lake.create_table("ns.dst", schema=SCHEMA)
    for c in range(COMMITS):
        ids = list(range(c * ROWS, (c + 1) * ROWS))
        source.append(pa.table({"id": ids, "v": [i * 3 for i in ids]}, schema=SCHEMA))


def _run(target: str, point: str = "none", n: int = 0) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(CHILD), target, point, str(n)], capture_output=True, text=True,
                          env=env, timeout=120)


def _assert_exactly_once(lake: icefloe.Lake) -> None:
    ids = lake.table("ns.dst").scan(columns=["id"]).to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(COMMITS * ROWS)), "a source row is missing or duplicated in the sink"


@pytest.mark.parametrize("point", ["transform", "commit", "after-commit"])
def test_local_pipe_killed_then_restarted_is_exactly_once(tmp_path: Path, point: str) -> None:
    warehouse = tmp_path / "warehouse"
    with icefloe.open(warehouse) as lake:
        _fill(lake)
    crashed = _run(f"local:{warehouse}", point, 3)  # the third step of six
    assert crashed.returncode == -9, crashed.stderr
    with icefloe.open(warehouse) as lake:
        sink_rows = lake.table("ns.dst").scan().to_table().num_rows
        # Steps 1-2 landed; step 3 landed only when killed after its batch was durable.
        assert sink_rows == (3 if point == "after-commit" else 2) * 2 * ROWS
    finished = _run(f"local:{warehouse}")
    assert finished.returncode == 0, finished.stderr
    with icefloe.open(warehouse) as lake:
        _assert_exactly_once(lake)


def test_remote_pipe_killed_at_random_moments_is_exactly_once(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    with icefloe.open(warehouse) as lake:
        _fill(lake)
    server = ServerProcess(warehouse).start()
    rng = random.Random(20261201)
    try:
        target = f"remote:{server.location}"
        for _ in range(3):
            env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
            child = subprocess.Popen([sys.executable, str(CHILD), target, "none", "0"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.8, 2.5))  # imports take ~1 s: kills land before, during and after steps
            child.kill()
            child.wait()
        finished = _run(target)
        assert finished.returncode == 0, finished.stderr
        with icefloe.connect(server.location) as lake:
            _assert_exactly_once(lake)
    finally:
        server.stop()
    assert "Traceback" not in server.log
