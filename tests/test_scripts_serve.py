"""``./scripts/serve`` as a new user runs it first: it says what it installs, installs the runtime
dependencies only (no ``dev`` extra), and leaves ``scripts/test``'s ``dev`` install alone. Run on a
copy of the scripts with a stand-in ``.venv`` whose python records the pip calls, so no network is
needed; the pyproject.toml is the real one (its license must be an SPDX string: setuptools
prints ~40 lines of deprecation warnings for a TOML table)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

from servers import ROOT

FAKE_PYTHON = """#!/usr/bin/env bash
echo "python $*" >> "$(dirname "$0")/../calls.log"
if [ "$1 $2 $3" = "-m pip install" ]; then
    echo "Collecting pyarrow>=20"
    echo "Collecting duckdb<3,>=2.0"
    echo "Installing collected packages: pyarrow, duckdb, icefloe"
    echo "Successfully installed pyarrow duckdb icefloe"
fi
"""
FAKE_ICEFLOE = """#!/usr/bin/env bash
echo "icefloe $*" >> "$(dirname "$0")/../calls.log"
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "icefloe"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("icefloe", FAKE_ICEFLOE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return root


def _run(root: Path, *args: str, extras: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ICEFLOE_EXTRAS"}
    if extras is not None:
        env["ICEFLOE_EXTRAS"] = extras
    return subprocess.run(["bash", *args], cwd=root, capture_output=True, text=True, timeout=60, env=env)


def _calls(root: Path) -> list[str]:
    log = root / ".venv" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_serve_installs_the_runtime_dependencies_and_says_so(tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = _run(root, "scripts/serve", "--port", "0")
    assert result.returncode == 0, result.stderr
    installs = [c for c in _calls(root) if "-e" in c.split()]
    assert installs and installs[0].endswith("-e ."), installs  # no [dev]: no pyspark, selenium, mypy
    assert "installing icefloe and its dependencies into .venv" in result.stderr
    assert "Collecting pyarrow" in result.stderr and "done" in result.stderr  # progress as it goes
    assert _calls(root)[-1] == "icefloe serve --port 0"
    # Second run: nothing to install, straight to serving, silently.
    again = _run(root, "scripts/serve")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    # scripts/test (ICEFLOE_EXTRAS unset) needs the dev extra: installed now; then serve is content.
    (root / ".venv" / "calls.log").unlink()
    check = subprocess.run(
        ["bash", "-c", 'source scripts/_env.sh && echo ok'], cwd=root, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "ICEFLOE_EXTRAS"},
    )
    assert check.returncode == 0 and any(c.endswith("-e .[dev]") for c in _calls(root)), (check.stderr, _calls(root))
    (root / ".venv" / "calls.log").unlink()
    assert _run(root, "scripts/serve").stderr == "" and _calls(root) == ["icefloe serve"]


def test_a_failed_install_shows_pip_s_last_lines(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / ".venv" / "bin" / "python").write_text(
        '#!/usr/bin/env bash\necho "ERROR: No matching distribution found for duckdb"; exit 1\n'
    )
    result = _run(root, "scripts/serve")
    assert result.returncode == 1
    assert "installing failed" in result.stderr and "No matching distribution found for duckdb" in result.stderr


def test_pyproject_license_is_an_spdx_string() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])
