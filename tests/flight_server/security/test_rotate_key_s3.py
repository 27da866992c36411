"""``icefloe rotate-key`` for an s3:// warehouse: its signing keys live in the --catalog-path
folder, where the servers of that catalog read them (bearer tokens and handles alike), against
the real S3 server."""

from __future__ import annotations

from pathlib import Path

import pyarrow.flight as flight
from cli_runner import clean_failure, icefloe
from s3_support import S3Server
from security_support import PASSWORDS
from servers import ServerProcess

from flight_server.security.tokens import KEY_FILE_NAME


def test_rotate_key_of_an_s3_warehouse(tmp_path: Path, s3_server: S3Server, s3_warehouse: str,
                                       users_file: Path) -> None:
    catalog = tmp_path / "catalog"
    args = ["--warehouse", s3_warehouse, "--catalog-path", str(catalog), "--users", str(users_file)]
    user, password = next(iter(PASSWORDS.items()))
    proc = ServerProcess(tmp_path / "unused", args, env=s3_server.env()).start()
    try:
        token = flight.FlightClient(proc.location).authenticate_basic_token(user, password)
    finally:
        proc.stop()
    key_file = catalog / KEY_FILE_NAME
    first_key = key_file.read_text().split()
    assert len(first_key) == 1  # the server kept its key in the catalog folder, not per process

    # Without the catalog folder, the refusal says what to pass.
    clean_failure(icefloe("rotate-key", "--warehouse", s3_warehouse), "pass the servers' --catalog-path")
    done = icefloe("rotate-key", "--warehouse", s3_warehouse, "--catalog-path", str(catalog), "--keep", "1")
    assert done.returncode == 0, done.stderr
    keys = key_file.read_text().split()
    assert len(keys) == 2 and keys[1] == first_key[0] and keys[0] != first_key[0]

    proc = ServerProcess(tmp_path / "unused", args, env=s3_server.env()).start()
    try:
        # The servers of this catalog read the rotated file (not a key of their own) ...
        assert f"signing key in {key_file}" in proc.log
        # ... and sign new tokens with its new key.
        client = flight.FlightClient(proc.location)
        new_token = client.authenticate_basic_token(user, password)
        assert new_token != token
        assert list(client.list_actions(flight.FlightCallOptions(headers=[new_token])))
    finally:
        proc.stop()
