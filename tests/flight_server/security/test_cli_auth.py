"""The client commands against a server with --users and with TLS: --user (password on stdin),
--token from ``icefloe login``, --tls-root-certs, each the same on every command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_runner import clean_failure, cli_env, icefloe, running
from security_support import PASSWORDS, Pki
from servers import ServerProcess


@pytest.fixture
def tls_auth_server(warehouse: Path, pki: Pki, users_file: Path) -> Iterator[ServerProcess]:
    args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--users", str(users_file)]
    with running(ServerProcess(warehouse, args)) as proc:
        yield proc


def _login(uri: str, user: str, *extra: str) -> str:
    result = icefloe("login", "--uri", uri, "--user", user, *extra, input=PASSWORDS[user] + "\n")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_user_password_token_and_roles_on_every_command(auth_server: ServerProcess, tmp_path: Path) -> None:
    uri = auth_server.location
    # sql --user: the password is the first line of stdin, the statements follow.
    script = f"{PASSWORDS['alice']}\nCREATE SCHEMA sec;\nCREATE TABLE sec.t (id BIGINT);\nSELECT 41 + 1 AS n;\n"
    result = icefloe("sql", "--uri", uri, "--user", "alice", "--format", "json", input=script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == '{"n": 42}'
    clean_failure(icefloe("sql", "--uri", uri, "--user", "alice", "SELECT 1", input="wrong\n"),
                  "invalid username or password")
    anonymous = icefloe("sql", "--uri", uri, "SELECT 1")
    clean_failure(anonymous, "authentication required")
    assert "give --user NAME" in anonymous.stderr
    # --token (or ICEFLOE_TOKEN) from icefloe login.
    token = _login(uri, "rita")
    assert icefloe("sql", "--uri", uri, "--token", token, "SELECT 1 AS x", "--format", "json").stdout == '{"x": 1}\n'
    result = icefloe("sql", "--format", "json", "SELECT 2 AS y", env={"ICEFLOE_URI": uri, "ICEFLOE_TOKEN": token})
    assert result.stdout == '{"y": 2}\n', result.stderr
    # load: wendy may write, rita may not.
    data = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), data)
    result = icefloe("load", "--uri", uri, "--user", "wendy", str(data), "sec.t", input=PASSWORDS["wendy"] + "\n")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 3
    clean_failure(icefloe("load", "--uri", uri, "--token", token, str(data), "sec.t"), "needs role write")
    # maintain through the server needs admin.
    result = icefloe("maintain", "sec.t", "--uri", uri, "--user", "alice", input=PASSWORDS["alice"] + "\n")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 3
    clean_failure(icefloe("maintain", "sec.t", "--uri", uri, "--token", token), "this needs role")
    # subscribe as a reader.
    proc = subprocess.Popen(
        [sys.executable, "-m", "flight_server.cli", "subscribe", "--uri", uri, "--user", "rita", "--after", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(PASSWORDS["rita"] + "\n")
        proc.stdin.close()
        assert json.loads(proc.stdout.readline())["table"] == "t"
    finally:
        proc.terminate()
        proc.wait(30)


def test_tls_root_certs_on_every_command(tls_auth_server: ServerProcess, pki: Pki, tmp_path: Path) -> None:
    uri = tls_auth_server.location
    assert uri.startswith("grpc+tls://")
    roots = ["--tls-root-certs", str(pki.ca_cert)]
    token = _login(uri, "alice", *roots)
    result = icefloe("sql", "--uri", uri, *roots, "--token", token, "--format", "json",
                     "CREATE SCHEMA tls_ns; CREATE TABLE tls_ns.t (id BIGINT); SELECT 1 AS ok")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == '{"ok": 1}'
    data = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": pa.array([7], pa.int64())}), data)
    result = icefloe("load", str(data), "tls_ns.t", env={"ICEFLOE_URI": uri, "ICEFLOE_TOKEN": token,
                                                         "ICEFLOE_TLS_ROOT_CERTS": str(pki.ca_cert)})
    assert result.returncode == 0, result.stderr
    result = icefloe("maintain", "tls_ns.t", "--uri", uri, *roots, "--token", token)
    assert result.returncode == 0, result.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "flight_server.cli", "subscribe", "--uri", uri, *roots, "--token", token,
         "--after", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["namespace"] == "tls_ns"
    finally:
        proc.terminate()
        proc.wait(30)
    # Without the CA the server is not trusted: a clean error, not a traceback.
    clean_failure(icefloe("sql", "--uri", uri, "--token", token, "SELECT 1"), "cannot reach the server")
    clean_failure(icefloe("login", "--uri", uri, "--user", "alice", input=PASSWORDS["alice"] + "\n"), "login failed")
