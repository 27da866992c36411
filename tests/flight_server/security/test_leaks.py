"""No password, token or traceback in the server log or in any message a client receives."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow.flight as flight
from security_helpers import RPCS, basic, options, outcome
from security_support import PASSWORDS
from servers import ServerProcess

from flight_server.security.users import load_users


def test_logs_and_errors_hold_no_secrets_or_tracebacks(auth_server: ServerProcess, users_file: Path) -> None:
    client = flight.FlightClient(auth_server.location)
    messages: list[str] = []
    tokens = [client.authenticate_basic_token(u, pw)[1].decode() for u, pw in PASSWORDS.items()]
    # a user typing a password into the user-name field must not have it logged either
    typo = basic(PASSWORDS["alice"], "x")
    attempts = [
        options(), options(basic("rita", "wrong-" + PASSWORDS["rita"])), options(typo),
        options(basic("nobody", PASSWORDS["wendy"])),
        options((b"authorization", tokens[0][:-4].encode() + b"AAAA")),
        *[options((b"authorization", t.encode())) for t in tokens],
    ]
    for opts in attempts:
        for _, call in RPCS.values():
            _, exc = outcome(lambda call=call, opts=opts: call(client, opts))  # type: ignore[misc]
            if exc is not None:
                messages.append(str(exc))
        try:
            client.authenticate_basic_token("alice", "wrong-" + PASSWORDS["alice"], opts)
        except flight.FlightError as exc:
            messages.append(str(exc))
    client.close()
    assert auth_server.stop() == 0
    log = auth_server.log
    assert "login failed: wrong password for user 'rita'" in log
    assert "login failed: unknown user name" in log
    assert "login: user 'alice' (role admin)" in log

    secrets = [*PASSWORDS.values(), *tokens, *(t.split(".")[2] for t in tokens)]
    secrets += [u.password_hash for u in load_users(users_file).values()]
    secrets += [base64.b64encode(f"{u}:{pw}".encode()).decode() for u, pw in PASSWORDS.items()]
    assert messages
    for text, where in [(log, "server log"), *((m, "client message") for m in messages)]:
        for secret in secrets:
            assert secret not in text, f"secret found in {where}"
        assert "Traceback" not in text, f"traceback in {where}: {text}"
        assert "/flight_server/" not in text and ".py" not in text, f"source path in {where}: {text}"
