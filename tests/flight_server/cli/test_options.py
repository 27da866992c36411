"""Every client command names its server and credentials the same way (DESIGN: CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from cli_runner import clean_failure, cli_env, icefloe, running
from servers import ServerProcess

from catalog import RocksCatalog

CLIENT_COMMANDS = ["sql", "subscribe", "maintain", "load"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("cli_options") / "warehouse"
    cat = RocksCatalog("setup", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    cat.close()
    with running(ServerProcess(warehouse)) as proc:
        yield proc


@pytest.mark.parametrize("command", [*CLIENT_COMMANDS, "login"])
def test_every_client_command_has_the_same_connection_options(command: str) -> None:
    result = icefloe(command, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--uri", "--user", "--tls-root-certs", *(() if command == "login" else ("--token",))):
        assert option in result.stdout, (command, option)
    # The old spellings still work but are not offered any more.
    assert "--server" not in result.stdout and "--location" not in result.stdout


def test_uri_from_the_environment(server: ServerProcess) -> None:
    env = {"ICEFLOE_URI": server.location}
    result = icefloe("sql", "--format", "json", "SELECT 1 AS one", env=env)
    assert result.stdout.strip() == '{"one": 1}', result.stderr
    result = icefloe("maintain", "ns.t", env=env)  # ICEFLOE_URI: maintenance through the server
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["table"] == "ns.t"
    line = _first_event(["subscribe", "--after", "0"], env)
    assert line["table"] == "t" and line["operation"] == "create"


def _first_event(args: list[str], env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.Popen([sys.executable, "-m", "flight_server.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(env))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        event: dict[str, object] = json.loads(line)
        return event
    finally:
        proc.terminate()
        proc.wait(30)


def test_old_spellings_still_work_with_a_warning(server: ServerProcess) -> None:
    result = icefloe("sql", "--server", server.location, "--format", "json", "SELECT 1 AS one")
    assert result.stdout.strip() == '{"one": 1}'
    assert "--server is deprecated; use --uri" in result.stderr
    result = icefloe("maintain", "ns.t", "--server", server.location)
    assert result.returncode == 0 and "deprecated" in result.stderr, result.stderr
    result = icefloe("sql", "--format", "json", "SELECT 2 AS two", env={"ICEFLOE_SERVER": server.location})
    assert result.stdout.strip() == '{"two": 2}'
    assert "ICEFLOE_SERVER is deprecated; use ICEFLOE_URI" in result.stderr
    assert _first_event(["subscribe", "--location", server.location, "--after", "0"], {})["seq"] == 1
    # --uri wins over an old spelling in the environment, silently.
    result = icefloe("sql", "--uri", server.location, "SELECT 3", env={"ICEFLOE_LOCATION": "grpc://127.0.0.1:1"})
    assert result.returncode == 0 and "deprecated" not in result.stderr, result.stderr


def test_conflicting_options_are_usage_errors(server: ServerProcess, tmp_path: Path) -> None:
    clean_failure(icefloe("sql", "--server", server.location, "--location", "grpc://127.0.0.1:1", "SELECT 1"),
                  "name different servers")
    clean_failure(icefloe("sql", "--uri", server.location, "--token", "t", "--user", "u", "SELECT 1"),
                  "--token or --user, not both")
    clean_failure(icefloe("maintain", "--uri", server.location, "--warehouse", str(tmp_path)), "not both")
    missing = tmp_path / "missing-ca.pem"
    clean_failure(icefloe("sql", "--uri", server.location, "--tls-root-certs", str(missing), "SELECT 1"),
                  "--tls-root-certs: cannot read")


def test_maintain_offline_when_warehouse_is_given_on_the_command_line(tmp_path: Path) -> None:
    """ICEFLOE_URI in the environment does not stop an explicit offline run."""
    warehouse = tmp_path / "offline"
    cat = RocksCatalog("setup", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    cat.close()
    result = icefloe("maintain", "ns.t", "--warehouse", str(warehouse), env={"ICEFLOE_URI": "grpc://127.0.0.1:1"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["table"] == "ns.t"


def test_subscribe_to_a_server_out_of_reach_says_so_and_keeps_trying() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "flight_server.cli", "subscribe", "--uri", "grpc://127.0.0.1:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # within a few reconnection attempts
        assert "cannot reach the feed at grpc://127.0.0.1:1" in line and "still retrying" in line, line
        assert proc.poll() is None  # it goes on trying: the server may come back
    finally:
        proc.terminate()
        proc.wait(30)
