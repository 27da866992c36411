"""`icefloe serve --demo` and the `icefloe sql` client, as a newcomer would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servers import ROOT, ServerProcess


def icefloe_sql(location: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "flight_server.cli", "sql", "--uri", location, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_demo_and_sql_client(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "warehouse", ["--demo"]).start()
    try:
        result = icefloe_sql(proc.location, "SELECT name, population FROM demo.cities WHERE country = 'IS'")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0].split() == ["name", "|", "population"]
        assert "Reykjavik" in result.stdout and "(1 row)" in result.stdout

        result = icefloe_sql(proc.location, "--format", "json", "SELECT count(*) AS n FROM demo.floe_sightings")
        assert result.stdout.strip() == '{"n": 480}'

        result = icefloe_sql(proc.location, "SELEC 1")
        assert result.returncode == 1
        assert "syntax error" in result.stderr and "Traceback" not in result.stderr
        # --demo again on the same warehouse keeps the tables (no duplicates).
        proc.restart()
        result = icefloe_sql(proc.location, "--format", "csv", "SELECT count(*) AS n FROM demo.cities")
        assert result.stdout.split() == ['"n"', "8"]
    finally:
        proc.stop()
