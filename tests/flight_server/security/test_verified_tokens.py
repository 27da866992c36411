"""Bearer tokens are checked once per token, not once per call (``auth.VerifiedTokens``): what a
remembered check must still refuse, on the real middleware factory."""

from __future__ import annotations

import secrets
import time

import pyarrow.flight as flight
import pytest

from flight_server.security.auth import AuthMiddlewareFactory, CallLimiter
from flight_server.security.tokens import TokenSigner
from flight_server.security.users import User, hash_password


def _factory(ttl_s: float = 3600.0) -> tuple[AuthMiddlewareFactory, User]:
    user = User("rita", "read", hash_password("rita-pw-1234"))
    return AuthMiddlewareFactory({"rita": user}, TokenSigner(secrets.token_bytes(32), ttl_s), CallLimiter(0)), user


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_remembered_token_still_names_its_user_and_an_altered_one_is_refused() -> None:
    auth, user = _factory()
    token = auth.issue_token(user)
    assert auth.principal_for(_bearer(token)).name == "rita"
    assert auth.principal_for(_bearer(token)).name == "rita"  # the second call finds it remembered
    body, mac = token.rsplit(".", 1)
    altered = body + "." + ("A" if mac[0] != "A" else "B") + mac[1:]
    with pytest.raises(flight.FlightUnauthenticatedError, match="invalid"):
        auth.principal_for(_bearer(altered))


def test_a_remembered_token_is_refused_once_its_password_changes() -> None:
    auth, user = _factory()
    token = auth.issue_token(user)
    assert auth.principal_for(_bearer(token)).name == "rita"
    auth.users = {"rita": User("rita", "read", hash_password("rita-new-pw-5678"))}  # what SIGHUP does
    with pytest.raises(flight.FlightUnauthenticatedError, match="revoked"):
        auth.principal_for(_bearer(token))
    auth.users = {}
    with pytest.raises(flight.FlightUnauthenticatedError, match="revoked"):
        auth.principal_for(_bearer(token))


def test_a_remembered_token_expires_at_its_time() -> None:
    auth, user = _factory(ttl_s=1.0)
    token = auth.issue_token(user)
    assert auth.principal_for(_bearer(token)).name == "rita"
    claims = auth.tokens.claims(auth.signer, token)
    while time.time() < claims.expires_at:
        time.sleep(0.1)
    with pytest.raises(flight.FlightUnauthenticatedError, match="expired"):
        auth.principal_for(_bearer(token))
