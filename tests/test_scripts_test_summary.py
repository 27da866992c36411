"""``./scripts/test`` ends with one summary of its parts (scripts/_parts.sh): each part's result,
its passed / failed / skipped counts read from the part's own closing lines, and its time, then
a last line ``total: N passed, N failed, N skipped``; the exit status says whether all passed.
The parts here are stand-ins printing what pytest, cargo and a skipping script print."""

from __future__ import annotations

import subprocess

from servers import ROOT

PARTS = r"""
source scripts/_parts.sh
pytest_like() { echo "....sF"; echo "==== 12 passed, 1 failed, 3 skipped, 2 errors in 4.20s ===="; return 1; }
cargo_like() { echo "running 5 tests"; echo "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out"
               echo "test result: ok. 18 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"; }
skipping() { echo "java not found: the pyspark 4.3.0 tests are skipped"; }
quiet_pytest() { echo "7 passed in 0.50s"; }
part pytest pytest_like
part rust cargo_like
part spark-latest skipping
part docs true
part quiet quiet_pytest
summary
"""


def _summary(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_the_summary_is_the_last_lines_and_counts_every_part() -> None:
    result = _summary(PARTS)
    assert result.returncode == 1, result.stderr  # one part failed
    lines = result.stdout.splitlines()
    assert lines[-1] == "total: 43 passed, 3 failed, 4 skipped", lines[-8:]
    table = {line.split()[0]: line.split()[1:5] for line in lines[-7:-1]}
    assert table["pytest"] == ["FAILED", "12", "3", "3"]  # errors count as failures
    assert table["rust"] == ["ok", "23", "0", "1"]  # summed over the test binaries
    assert table["spark-latest"] == ["skipped", "0", "0", "0"]
    assert table["docs"] == ["ok", "1", "0", "0"]
    assert table["quiet"] == ["ok", "7", "0", "0"]
    assert "....sF" in result.stdout  # each part's own output still reaches the terminal


def test_all_parts_passing_exits_zero() -> None:
    result = _summary("source scripts/_parts.sh\npart docs true\nsummary\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "total: 1 passed, 0 failed, 0 skipped"
