"""SIGTERM sent the moment the readiness line appears stops the server cleanly (exit 0).

The line used to be logged before the signal handlers were installed, so a quick SIGTERM
killed the process (-15) instead; under load that made every start-then-stop test flaky.
"""

from __future__ import annotations

from pathlib import Path

from servers import ServerProcess


def test_sigterm_right_after_the_readiness_line_is_a_clean_stop(tmp_path: Path) -> None:
    codes = []
    for i in range(10):
        proc = ServerProcess(tmp_path / f"warehouse{i}").start()
        codes.append(proc.stop())  # at once: no call, no wait
        assert "Traceback" not in proc.log, proc.log
    assert codes == [0] * 10
