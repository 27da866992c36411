"""Bearer tokens: expiry, surviving a restart, revocation, the signing key file."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pyarrow.flight as flight
import pytest
from security_helpers import RPCS, options, outcome
from security_support import PASSWORDS, write_users_file
from servers import ServerProcess

from flight_server.security.tokens import KEY_FILE_NAME
from flight_server.security.users import hash_password, load_users


def _login(server: ServerProcess, user: str, password: str) -> tuple[bytes, bytes]:
    client = flight.FlightClient(server.location)
    try:
        return client.authenticate_basic_token(user, password)
    finally:
        client.close()


def _list_actions(server: ServerProcess, header: tuple[bytes, bytes]) -> tuple[str, BaseException | None]:
    client = flight.FlightClient(server.location)
    try:
        return outcome(lambda: client.list_actions(options(header)))
    finally:
        client.close()


def test_expired_token_is_unauthenticated(warehouse: Path, users_file: Path) -> None:
    server = ServerProcess(warehouse, ["--users", str(users_file), "--token-ttl", "2"]).start()
    try:
        header = _login(server, "rita", PASSWORDS["rita"])
        assert _list_actions(server, header)[0] == "past_auth"
        deadline = time.monotonic() + 10
        result, exc = _list_actions(server, header)
        while result == "past_auth" and time.monotonic() < deadline:
            time.sleep(0.5)
            result, exc = _list_actions(server, header)
        assert result == "unauthenticated", exc
        assert "expired" in str(exc)
        # logging in again gives a fresh token that works
        assert _list_actions(server, _login(server, "rita", PASSWORDS["rita"]))[0] == "past_auth"
    finally:
        server.stop()


def test_token_survives_restart_and_key_file_is_private(warehouse: Path, users_file: Path) -> None:
    server = ServerProcess(warehouse, ["--users", str(users_file)]).start()
    try:
        header = _login(server, "wendy", PASSWORDS["wendy"])
        key_file = warehouse / KEY_FILE_NAME
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        server.restart()
        assert _list_actions(server, header)[0] == "past_auth"
    finally:
        server.stop()


def test_group_readable_key_file_is_refused(warehouse: Path, users_file: Path) -> None:
    server = ServerProcess(warehouse, ["--users", str(users_file)]).start()
    server.stop()
    (warehouse / KEY_FILE_NAME).chmod(0o644)
    with pytest.raises(RuntimeError, match="did not start"):
        server.start(timeout=30)
    assert "readable by others" in server.log


def test_password_change_and_removal_revoke_tokens_and_demotion_applies_at_once(
        warehouse: Path, tmp_path: Path) -> None:
    users = write_users_file(tmp_path / "users.toml")
    server = ServerProcess(warehouse, ["--users", str(users)]).start()
    try:
        tokens = {u: _login(server, u, pw) for u, pw in PASSWORDS.items()}
        # rita gets a new password, wendy is removed, alice is demoted to read
        # (alice keeps her password_hash line: a new hash, even of the same password, revokes too)
        alice_hash = load_users(users)["alice"].password_hash
        users.write_text(
            f'[users.alice]\nrole = "read"\npassword_hash = "{alice_hash}"\n\n'
            f'[users.rita]\nrole = "read"\npassword_hash = "{hash_password("rita-new-pw-55aa")}"\n'
        )
        server.restart()
        assert _list_actions(server, tokens["rita"])[0] == "unauthenticated"
        assert _list_actions(server, tokens["wendy"])[0] == "unauthenticated"
        client = flight.FlightClient(server.location)
        try:
            assert outcome(lambda: client.list_actions(options(tokens["alice"])))[0] == "past_auth"
            put = RPCS["DoPut(path)"][1]
            assert outcome(lambda: put(client, options(tokens["alice"])))[0] == "permission_denied"
            with pytest.raises(flight.FlightUnauthenticatedError):
                client.authenticate_basic_token("rita", PASSWORDS["rita"])
            assert client.authenticate_basic_token("rita", "rita-new-pw-55aa")[1].startswith(b"Bearer ")
        finally:
            client.close()
    finally:
        server.stop()


def test_token_from_another_warehouse_key_is_refused(tmp_path: Path, users_file: Path) -> None:
    one = ServerProcess(tmp_path / "one", ["--users", str(users_file)]).start()
    two = ServerProcess(tmp_path / "two", ["--users", str(users_file)]).start()
    try:
        header = _login(one, "alice", PASSWORDS["alice"])
        assert _list_actions(one, header)[0] == "past_auth"
        result, exc = _list_actions(two, header)
        assert result == "unauthenticated" and "invalid" in str(exc)
    finally:
        one.stop()
        two.stop()


def _wait_for_log(server: ServerProcess, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log:
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{server.log}"
        time.sleep(0.1)


def test_sighup_reloads_the_users_file_and_a_bad_file_keeps_the_old_users(warehouse: Path, tmp_path: Path) -> None:
    import signal

    users = write_users_file(tmp_path / "users.toml")
    server = ServerProcess(warehouse, ["--users", str(users)]).start()
    try:
        wendy = _login(server, "wendy", PASSWORDS["wendy"])
        rita = _login(server, "rita", PASSWORDS["rita"])
        # remove wendy, keep rita's hash line as it is, add a new user
        rita_hash = load_users(users)["rita"].password_hash
        users.write_text(f'[users.rita]\nrole = "read"\npassword_hash = "{rita_hash}"\n\n'
                         f'[users.nina]\nrole = "write"\npassword_hash = "{hash_password("nina-pw-3c1d")}"\n')
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        _wait_for_log(server, "users file reloaded: 2 user(s)")
        assert _list_actions(server, wendy)[0] == "unauthenticated"
        assert _list_actions(server, rita)[0] == "past_auth"
        nina = _login(server, "nina", "nina-pw-3c1d")
        assert _list_actions(server, nina)[0] == "past_auth"
        # a new password for nina: the old one (verified and cached a moment ago) no longer works
        users.write_text(f'[users.nina]\nrole = "write"\npassword_hash = "{hash_password("nina-pw-NEW")}"\n')
        server.proc.send_signal(signal.SIGHUP)
        _wait_for_log(server, "users file reloaded: 1 user(s)")
        client = flight.FlightClient(server.location)
        try:
            with pytest.raises(flight.FlightUnauthenticatedError):
                client.authenticate_basic_token("nina", "nina-pw-3c1d")
            nina = client.authenticate_basic_token("nina", "nina-pw-NEW")
        finally:
            client.close()
        # a broken file is refused and the users in force stay
        users.write_text("[users.nina\n")
        server.proc.send_signal(signal.SIGHUP)
        _wait_for_log(server, "users file not reloaded")
        assert _list_actions(server, nina)[0] == "past_auth"
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_token_past_half_its_life_is_renewed_in_the_response(warehouse: Path, users_file: Path) -> None:
    seen: list[str] = []

    class Capture(flight.ClientMiddlewareFactory):  # type: ignore[misc]
        def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
            class M(flight.ClientMiddleware):  # type: ignore[misc]
                def received_headers(self, headers: dict[str, list[str]]) -> None:
                    seen.extend(headers.get("authorization", []))
            return M()

    server = ServerProcess(warehouse, ["--users", str(users_file), "--token-ttl", "6"]).start()
    client = flight.FlightClient(server.location, middleware=[Capture()])
    try:
        original = client.authenticate_basic_token("rita", PASSWORDS["rita"])
        seen.clear()
        client.list_actions(options(original))
        assert seen == []  # fresh: no renewal yet
        time.sleep(3.5)  # past half of the 6 s lifetime
        client.list_actions(options(original))
        assert len(seen) == 1 and seen[0].startswith("Bearer ifl1."), seen
        renewed = (b"authorization", seen[0].encode())
        assert renewed[1] != original[1]
        deadline = time.monotonic() + 10
        while _list_actions(server, original)[0] == "past_auth":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert _list_actions(server, renewed)[0] == "past_auth"  # the renewal outlives the original
    finally:
        client.close()
        server.stop()
