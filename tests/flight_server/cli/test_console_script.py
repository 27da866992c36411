"""The ``icefloe`` console script pyproject.toml declares runs the commands (the script pip
writes does ``from MODULE import ATTR; sys.exit(ATTR())``, which is what runs here)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from cli_runner import cli_env
from servers import ROOT

from flight_server import __version__


def test_the_declared_console_script_runs_the_commands() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["icefloe"].partition(":")
    launcher = f"import sys; from {module} import {attr}; sys.exit({attr}())"
    version = subprocess.run([sys.executable, "-c", launcher, "--version"], capture_output=True, text=True,
                             timeout=120, env=cli_env(), cwd=ROOT)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"icefloe, version {__version__}"
    usage = subprocess.run([sys.executable, "-c", launcher, "--help"], capture_output=True, text=True,
                           timeout=120, env=cli_env(), cwd=ROOT)
    assert usage.returncode == 0, usage.stderr
    for command in ("serve", "sql", "subscribe", "load", "maintain", "status", "login", "passwd"):
        assert f"  {command}" in usage.stdout, usage.stdout
