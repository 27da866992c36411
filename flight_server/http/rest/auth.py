"""Who is calling the REST catalog: OAuth2 client credentials in, Flight's bearer tokens out.

With ``--users``, ``POST /v1/oauth/tokens`` takes ``grant_type=client_credentials`` with the
user name as ``client_id`` and the password as ``client_secret`` (what pyiceberg's and
Iceberg-Java's ``credential = "id:secret"`` send) and answers a bearer token signed exactly as
Flight's Handshake tokens are, so one token works on both ports. The token-exchange grant
(Iceberg-Java's refresh: the current token as ``subject_token``) renews a valid token the way
Flight renews tokens: the new one keeps the subject's login time and session, and expires at
the latest 7 days after that login (``tokens.MAX_SESSION_S``), so renewing cannot keep a
login alive forever; past that the exchange is refused (401) and the client logs in again.
Without ``--users`` every call is anonymous and the token endpoint says so.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import parse_qs

import pyarrow.flight as flight
from starlette.responses import JSONResponse

from flight_server.http.rest.errors import RestError
from flight_server.security.auth import AuthMiddlewareFactory, Principal

logger = logging.getLogger("icefloe.http.rest")

CLIENT_CREDENTIALS = "client_credentials"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
MAX_FORM_BYTES = 16 * 1024


def _oauth_error(status: int, error: str, description: str) -> JSONResponse:
    # RFC 6749 section 5.2: the token endpoint's errors have their own shape.
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


class RestAuth:
    """Authentication and roles for the REST catalog.

    Args:
        auth: Flight's authenticator (users, token signer); None when auth is off.
        token_ttl_s: Lifetime of issued tokens, reported as ``expires_in``.
    """

    def __init__(self, auth: AuthMiddlewareFactory | None, token_ttl_s: float) -> None:
        self._auth = auth
        self._ttl_s = token_ttl_s

    @property
    def enabled(self) -> bool:
        return self._auth is not None

    def principal(self, authorization: str | None) -> Principal | None:
        """The caller, or None when auth is off.

        Raises:
            RestError: 401 NotAuthorizedException for missing or bad credentials.
        """
        if self._auth is None:
            return None
        try:
            return self._auth.principal_for(authorization)
        except flight.FlightUnauthenticatedError as exc:
            raise RestError(401, "NotAuthorizedException", _flight_message(exc)) from None

    @staticmethod
    def require(principal: Principal | None, role: str) -> None:
        """Raise 403 ForbiddenException unless ``principal`` has at least ``role``."""
        if principal is not None and not principal.allows(role):
            raise RestError(
                403, "ForbiddenException", f"user {principal.name!r} has role {principal.role}; this needs role {role}"
            )

    def token(self, body: bytes) -> JSONResponse:
        """Answer ``POST /v1/oauth/tokens`` (a form body, as RFC 6749 says)."""
        if self._auth is None:
            return _oauth_error(400, "invalid_request", "authentication is off on this server (no --users)")
        if len(body) > MAX_FORM_BYTES:
            return _oauth_error(400, "invalid_request", "token request too large")
        try:
            form = {key: values[0] for key, values in parse_qs(body.decode("utf-8"), strict_parsing=False).items()}
        except (UnicodeDecodeError, ValueError):
            return _oauth_error(400, "invalid_request", "token request must be application/x-www-form-urlencoded")
        grant = form.get("grant_type")
        expires_in = int(self._ttl_s)
        try:
            if grant == CLIENT_CREDENTIALS:
                client_id, secret = form.get("client_id"), form.get("client_secret")
                if not client_id or secret is None:
                    return _oauth_error(400, "invalid_request", "client_credentials needs client_id and client_secret")
                user = self._auth.check_password(client_id, secret)
                token = self._auth.issue_token(user)
            elif grant == TOKEN_EXCHANGE:
                subject = form.get("subject_token", "")
                if not subject:
                    return _oauth_error(400, "invalid_request", "token exchange needs subject_token")
                user, token, expires_at = self._auth.exchange_token(subject)
                expires_in = max(0, min(expires_in, int(expires_at - time.time())))
            else:
                return _oauth_error(400, "unsupported_grant_type",
                                    f"grant_type must be {CLIENT_CREDENTIALS} or {TOKEN_EXCHANGE}")
        except flight.FlightUnauthenticatedError as exc:
            return _oauth_error(401, "invalid_client", _flight_message(exc))
        logger.info("REST token issued to user %r (role %s, %s)", user.name, user.role,
                    "exchange" if grant == TOKEN_EXCHANGE else "login")
        return JSONResponse({
            "access_token": token,
            "token_type": "bearer",
            "expires_in": expires_in,
            "issued_token_type": ACCESS_TOKEN_TYPE,
        })


def _flight_message(exc: BaseException) -> str:
    # pyarrow appends ". Detail: ..." to Flight error messages; keep the first sentence.
    return str(exc).split(". Detail:")[0].strip() or "authentication failed"
