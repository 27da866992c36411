"""Every RPC kind against a real server with --users: no credentials, wrong ones, each role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest
from security_helpers import RPCS, basic, options, outcome
from security_support import PASSWORDS, ROLES
from servers import ServerProcess

RANK = {"read": 0, "write": 1, "admin": 2}


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory, users_file: Path) -> Iterator[ServerProcess]:
    """One server for the whole matrix (starting one per case would dominate the run time)."""
    proc = ServerProcess(tmp_path_factory.mktemp("wh") / "warehouse", ["--users", str(users_file)]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[flight.FlightClient]:
    c = flight.FlightClient(shared_server.location)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def tokens(client: flight.FlightClient) -> dict[str, tuple[bytes, bytes]]:
    """One bearer header per user, from a Basic Handshake (what ADBC and JDBC do)."""
    return {user: client.authenticate_basic_token(user, pw) for user, pw in PASSWORDS.items()}


@pytest.mark.parametrize("rpc", sorted(RPCS))
def test_rpc_without_credentials_is_unauthenticated(client: flight.FlightClient, rpc: str) -> None:
    result, exc = outcome(lambda: RPCS[rpc][1](client, options()))
    assert result == "unauthenticated", exc
    assert "authentication required" in str(exc)


@pytest.mark.parametrize("rpc", sorted(RPCS))
@pytest.mark.parametrize("header", [
    basic("rita", "wrong-password"),
    basic("nobody", PASSWORDS["rita"]),
    basic("rita", ""),
    (b"authorization", b"Basic not-base64!"),
    (b"authorization", b"Basic " + b"cml0YQ=="),  # "rita" without a colon
    (b"authorization", b"Bearer ifl1.e30.AAAA"),
    (b"authorization", b"Bearer "),
    (b"authorization", b"Digest username=rita"),
], ids=["wrong-password", "unknown-user", "empty-password", "bad-base64", "no-colon", "forged-bearer",
        "empty-bearer", "other-scheme"])
def test_rpc_with_bad_credentials_is_unauthenticated(client: flight.FlightClient, rpc: str,
                                                     header: tuple[bytes, bytes]) -> None:
    result, exc = outcome(lambda: RPCS[rpc][1](client, options(header)))
    assert result == "unauthenticated", exc
    assert "Traceback" not in str(exc)


@pytest.mark.parametrize("rpc", sorted(RPCS))
@pytest.mark.parametrize("user", sorted(ROLES))
def test_rpc_with_bearer_token_by_role(client: flight.FlightClient, tokens: dict[str, tuple[bytes, bytes]],
                                       rpc: str, user: str) -> None:
    floor, call = RPCS[rpc]
    result, exc = outcome(lambda: call(client, options(tokens[user])))
    if RANK[ROLES[user]] >= RANK[floor]:
        assert result == "past_auth", exc
        # Past auth the service answers for itself (a result, or a precise non-auth error for
        # these minimal requests), never INTERNAL and never with a traceback.
        assert not isinstance(exc, flight.FlightInternalError), exc
        assert exc is None or "Traceback" not in str(exc), exc
    else:
        assert result == "permission_denied", exc
        assert "Traceback" not in str(exc)


@pytest.mark.parametrize("rpc", sorted(RPCS))
@pytest.mark.parametrize("user", ["rita", "wendy"])
def test_rpc_with_basic_credentials_on_the_call_by_role(client: flight.FlightClient, rpc: str, user: str) -> None:
    """Basic directly on the call (no Handshake), as the JDBC driver may do on its first call."""
    floor, call = RPCS[rpc]
    result, exc = outcome(lambda: call(client, options(basic(user, PASSWORDS[user]))))
    expected = "past_auth" if RANK[ROLES[user]] >= RANK[floor] else "permission_denied"
    assert result == expected, exc
    assert not isinstance(exc, flight.FlightInternalError), exc


@pytest.mark.parametrize("user", sorted(ROLES))
def test_basic_on_first_call_answers_with_bearer(shared_server: ServerProcess, user: str) -> None:
    """JDBC-style: Basic on an ordinary call works and the response carries a bearer token."""
    seen: list[dict[str, list[str]]] = []

    class Capture(flight.ClientMiddlewareFactory):  # type: ignore[misc]
        def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
            class M(flight.ClientMiddleware):  # type: ignore[misc]
                def received_headers(self, headers: dict[str, list[str]]) -> None:
                    seen.append(headers)
            return M()

    client = flight.FlightClient(shared_server.location, middleware=[Capture()])
    try:
        assert client.list_actions(options(basic(user, PASSWORDS[user]))) is not None
        bearer = [v for h in seen for v in h.get("authorization", [])]
        assert len(bearer) == 1 and bearer[0].startswith("Bearer ifl1.")
        # the token then works on its own
        result, exc = outcome(lambda: client.list_actions(options((b"authorization", bearer[0].encode()))))
        assert result == "past_auth", exc
    finally:
        client.close()


def test_handshake_with_wrong_password_is_unauthenticated(client: flight.FlightClient) -> None:
    for user, password in [("rita", "nope"), ("nobody", "nope"), ("alice", PASSWORDS["rita"])]:
        with pytest.raises(flight.FlightUnauthenticatedError, match="invalid username or password"):
            client.authenticate_basic_token(user, password)


def test_handshake_returns_distinct_tokens_per_user(tokens: dict[str, tuple[bytes, bytes]]) -> None:
    values = {v for _, v in tokens.values()}
    assert len(values) == len(tokens)
    assert all(v.startswith(b"Bearer ifl1.") for v in values)


def test_token_of_one_user_cannot_be_altered_to_another(client: flight.FlightClient,
                                                        tokens: dict[str, tuple[bytes, bytes]]) -> None:
    """Swap the payload of rita's (read) token for alice's (admin): the signature no longer matches."""
    _, rita = tokens["rita"][1].decode().split(" ", 1)[1].split(".", 1)
    rita_body, rita_mac = rita.split(".")
    alice_body = tokens["alice"][1].decode().split(" ", 1)[1].split(".")[1]
    forged = f"Bearer ifl1.{alice_body}.{rita_mac}".encode()
    result, exc = outcome(lambda: client.list_actions(options((b"authorization", forged))))
    assert result == "unauthenticated", exc
    assert rita_body != alice_body


def test_permission_denied_names_role_not_secrets(client: flight.FlightClient,
                                                  tokens: dict[str, tuple[bytes, bytes]]) -> None:
    result, exc = outcome(lambda: RPCS["DoPut(path)"][1](client, options(tokens["rita"])))
    assert result == "permission_denied"
    message = str(exc)
    assert "rita" in message and "write" in message
    assert PASSWORDS["rita"] not in message and tokens["rita"][1].decode() not in message


def test_repeated_basic_is_cached_but_a_wrong_password_never_is(client: flight.FlightClient,
                                                              shared_server: ServerProcess) -> None:
    for _ in range(3):
        assert outcome(lambda: client.list_actions(options(basic("wendy", PASSWORDS["wendy"]))))[0] == "past_auth"
    for wrong in [PASSWORDS["wendy"] + "x", PASSWORDS["wendy"][:-1], PASSWORDS["rita"]]:
        result, exc = outcome(lambda wrong=wrong: client.list_actions(options(basic("wendy", wrong))))  # type: ignore[misc]
        assert result == "unauthenticated", exc
    # wendy's cached login does not open rita's account with wendy's password, nor the reverse
    assert outcome(lambda: client.list_actions(options(basic("rita", PASSWORDS["wendy"]))))[0] == "unauthenticated"


def test_only_the_real_prepared_query_command_binds_parameters_with_read(
        client: flight.FlightClient, tokens: dict[str, tuple[bytes, bytes]]) -> None:
    """The DoPut floor matches the full type URL: a look-alike message name gets no read pass."""
    from security_helpers import _drain_put, _varint

    url = b"type.googleapis.com/evil.CommandPreparedStatementQuery"
    lookalike = b"\x0a" + _varint(len(url)) + url + b"\x12\x00"
    result, exc = outcome(lambda: _drain_put(client, flight.FlightDescriptor.for_command(lookalike),
                                             options(tokens["rita"])))
    assert result == "permission_denied", exc
