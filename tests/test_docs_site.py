"""The documentation site builds with ``mkdocs build --strict`` (no broken link or anchor), and
its generated parts are current: the configuration tables (from the CLI's click definitions,
scripts/gen-config-docs) and the benchmark table (from benchmarks/results/*.json,
./scripts/bench --report)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest
from servers import ROOT


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


config_docs = _module(ROOT / "scripts" / "config_docs.py")
run_records = _module(ROOT / "benchmarks" / "run_records.py")


def _mkdocs(site: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs-material is not installed (pip install -e '.[docs]'; scripts/test installs it)")


@needs_mkdocs
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = _mkdocs(tmp_path / "site", ROOT / "mkdocs.yml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


@needs_mkdocs
def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches a broken link: a copy of the site with one must fail."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "errors.md"
    page.write_text(page.read_text() + "\nSee [nothing](sql.md#no-such-heading).\n")
    result = _mkdocs(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert result.returncode != 0
    assert "no-such-heading" in result.stderr, result.stderr


def test_the_configuration_page_is_current() -> None:
    page = config_docs.PAGE.read_text()
    assert config_docs.render(page) == page, "docs/configuration.md is stale: run scripts/gen-config-docs"


def test_every_flag_and_variable_is_on_the_configuration_page() -> None:
    from flight_server.cli.main import main

    page = config_docs.PAGE.read_text()
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        assert f"- `icefloe {name}" in page, name
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert f"`{param.opts[-1]}`" in page, (name, param.opts)
                if isinstance(param.envvar, str):
                    assert f"`{param.envvar}`" in page, (name, param.envvar)
    missing = sorted(v for v in config_docs.source_variables() if f"`{v}`" not in page)
    assert not missing, f"ICEFLOE_* variables used in the sources but not in docs/configuration.md: {missing}"
    # The ones the issue named as missing from the old README, and the help that disagreed with it.
    for needed in ("`--rest-port`", "`ICEFLOE_EXTRAS`", "`ICEFLOE_SKIP_SPARK_LATEST`"):
        assert needed in page
    assert "more wait up to 5 s, then get UNAVAILABLE" in page


def test_the_configuration_check_sees_an_edit() -> None:
    page = config_docs.PAGE.read_text()
    edited = page.replace("| `--port` `INTEGER` |", "| `--port` `NUMBER` |")
    assert edited != page
    assert config_docs.render(edited) == page


def _run(folder: Path, name: str, when: str, raw: object = None, figures: dict[str, float] | None = None,
         load: float = 1.0) -> None:
    record: dict[str, object] = {"benchmark": name, "finished_at": when, "machine": {"cpus": 2},
                                 "load_average": [load, 1.0, 1.0], "raw": raw}
    if figures is not None:
        record["figures"] = figures
    (folder / f"{name}-{when[:19].replace(':', '')}.json").write_text(json.dumps(record))


def test_the_benchmark_report_takes_the_median_of_the_newest_three_runs(tmp_path: Path) -> None:
    for i, ratio in enumerate([9.0, 1.0, 2.0, 0.5]):  # the oldest (9.0) is left out
        _run(tmp_path, "appends", f"2026-12-0{i + 1}T10:00:00+00:00", raw={"bulk": {"ratio": ratio}}, load=i + 0.5)
    _run(tmp_path, "feed", "2026-12-04T10:00:00+00:00", figures={"feed.python": 12.5})
    _run(tmp_path, "feed", "2026-12-05T10:00:00+00:00", raw={"latency": [
        {"subscribers": 1, "ack_to_arrival_p99_ms": 0.4}, {"subscribers": 100, "ack_to_arrival_p99_ms": 7.5}]})
    table = run_records.report(tmp_path)
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| `")}
    bulk = rows[next(f.what for f in run_records.FIGURES if f.id == "appends.bulk")]
    assert "| **1** | 1 / 2 / 0.5 | >= 1.0 | yes | 2026-12-02 to 2026-12-04 | 2 | 1.5-3.5 |" in bulk, bulk
    python = rows[next(f.what for f in run_records.FIGURES if f.id == "feed.python")]
    assert "| **10 ms** | 12.5 ms / 7.5 ms | <= 10 | yes |" in python, python
    go = rows[next(f.what for f in run_records.FIGURES if f.id == "feed.go")]
    assert "not measured" in go


def test_the_benchmarks_page_is_current() -> None:
    page = run_records.PAGE.read_text()
    assert run_records.render(page) == page, "docs/benchmarks.md is stale: run ./scripts/bench --report --write"
    runs = run_records.load_runs()
    assert runs and all({"benchmark", "finished_at", "machine", "load_average"} <= run.keys() for run in runs)
    assert not [p.name for p in run_records.RESULTS.glob("*.json")
                if "-" not in p.stem], "one file per run: benchmarks/results/<name>-<UTC time>.json"


def test_scripts_bench_report_prints_the_table() -> None:
    """``./scripts/bench --report``. Through the script only when .venv is installed for this
    pyproject.toml (scripts/_env.sh would otherwise install it first); else the module it runs."""
    stamp = ROOT / ".venv" / ".icefloe-installed"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text().startswith(digest):
        command = ["bash", str(ROOT / "scripts" / "bench"), "--report"]
    else:
        assert 'exec python benchmarks/run_records.py "$@"' in (ROOT / "scripts" / "bench").read_text()
        command = [sys.executable, str(ROOT / "benchmarks" / "run_records.py")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == run_records.report(), result.stdout


def test_the_docs_send_no_reader_outside_the_repository() -> None:
    """A clone has no ../shared/ folder and no DESIGN.md: the contracts users rely on live in
    docs/ (contracts.md), so no page may send a reader to files outside the repository."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    offenders = [f"{page.relative_to(ROOT)}:{n}" for page in pages
                 for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
                 if "DESIGN.md" in line or "../shared" in line]
    assert not offenders, f"pages pointing outside the repository: {offenders}"
