"""Start-up policy (loopback without auth), users-file errors, and `icefloe passwd`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from servers import ROOT, ServerProcess

from flight_server.security.users import verify_password


def _passwd(stdin: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "flight_server.cli", "passwd"], input=stdin, text=True,
                          capture_output=True, env=env, timeout=60)


def test_passwd_prints_a_salted_argon2id_hash() -> None:
    first, second = _passwd("s3cret pass\n"), _passwd("s3cret pass\n")
    assert first.returncode == 0, first.stderr
    h1, h2 = first.stdout.strip(), second.stdout.strip()
    assert h1.startswith("$argon2id$") and h1 != h2  # a fresh salt each time
    assert verify_password(h1, "s3cret pass") and verify_password(h2, "s3cret pass")
    assert not verify_password(h1, "s3cret pass\n") and not verify_password(h1, "s3cret")
    assert "s3cret" not in first.stdout + first.stderr


def test_passwd_refuses_an_empty_password() -> None:
    result = _passwd("")
    assert result.returncode != 0 and "empty" in result.stderr and "$argon2" not in result.stdout


def test_without_users_the_server_says_it_is_loopback_only(server: ServerProcess) -> None:
    assert "authentication OFF (no --users): listening on loopback only" in server.log


def test_without_users_a_remote_host_is_refused_unless_allowed(warehouse: Path) -> None:
    refused = ServerProcess(warehouse, ["--host", "0.0.0.0"])
    with pytest.raises(RuntimeError, match="did not start"):
        refused.start(timeout=30)
    assert "refusing to serve 0.0.0.0 without authentication" in refused.log
    assert "Traceback" not in refused.log
    allowed = ServerProcess(warehouse, ["--host", "0.0.0.0", "--allow-remote-without-auth"]).start()
    try:
        assert "remote access allowed (--allow-remote-without-auth)" in allowed.log
    finally:
        allowed.stop()


def test_with_users_a_remote_host_is_served_with_warnings(warehouse: Path, users_file: Path) -> None:
    users_file.chmod(0o644)
    proc = ServerProcess(warehouse, ["--host", "0.0.0.0", "--users", str(users_file)]).start()
    try:
        assert "authentication on: 3 user(s)" in proc.log
        assert "tokens survive restarts" in proc.log
        assert "WARNING icefloe.server: security: authentication without TLS" in proc.log
        assert "is readable by other users" in proc.log
    finally:
        proc.stop()
    users_file.chmod(0o600)
    quiet = ServerProcess(warehouse, ["--users", str(users_file)]).start()
    quiet.stop()
    assert "WARNING" not in quiet.log


SECRET_HASH = "$argon2id$v=19$m=65536,t=3,p=4$c2VjcmV0c2FsdA$notarealhashbutsecretlooking"


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("[users.bob\nrole = 'read'", "is not valid TOML"),
    ("", "defines no users"),
    (f'[users.bob]\nrole = "root"\npassword_hash = "{SECRET_HASH}"\n', "role must be one of read, write, admin"),
    ('[users.bob]\nrole = "read"\npassword_hash = "plaintext-password-here"\n', "must be an Argon2 hash"),
    (f'[users.bob]\nrole = "read"\npassword = "x"\npassword_hash = "{SECRET_HASH}"\n', "unknown keys"),
    (f'[users."bo b"]\nrole = "read"\npassword_hash = "{SECRET_HASH}"\n', "user name must be"),
])
def test_bad_users_file_fails_fast_without_leaking(warehouse: Path, tmp_path: Path, content: str | None,
                                                   message: str) -> None:
    users = tmp_path / "users.toml"
    if content is not None:
        users.write_text(content)
    proc = ServerProcess(warehouse, ["--users", str(users)])
    with pytest.raises(RuntimeError, match="did not start"):
        proc.start(timeout=30)
    assert message in proc.log
    assert "Traceback" not in proc.log
    assert SECRET_HASH not in proc.log and "plaintext-password-here" not in proc.log
    assert not (warehouse / "catalog.rocksdb").exists()  # nothing was opened


def _login_cli(location: str, user: str, password: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "flight_server.cli", "login", "--uri", location, "--user", user],
                          input=password + "\n", text=True, capture_output=True, env=env, timeout=60)


def test_login_cli_prints_a_working_token(auth_server: ServerProcess) -> None:
    import pyarrow.flight as flight
    from security_support import PASSWORDS

    ok = _login_cli(auth_server.location, "rita", PASSWORDS["rita"])
    assert ok.returncode == 0, ok.stderr
    token = ok.stdout.strip()
    assert token.startswith("ifl1.")
    client = flight.FlightClient(auth_server.location)
    try:
        headers = [(b"authorization", f"Bearer {token}".encode())]
        assert isinstance(client.list_actions(flight.FlightCallOptions(headers=headers)), list)
    finally:
        client.close()
    bad = _login_cli(auth_server.location, "rita", "wrong")
    assert bad.returncode != 0 and "invalid username or password" in bad.stderr and not bad.stdout


def test_login_cli_against_a_server_without_users_says_so(server: ServerProcess) -> None:
    result = _login_cli(server.location, "rita", "pw")
    assert result.returncode != 0 and "--users" in result.stderr, result.stderr
