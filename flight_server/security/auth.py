"""Authentication and roles for every Flight call.

How a client logs in (what ADBC, the JDBC driver and ``FlightClient.authenticate_basic_token``
do): ``Handshake`` with the header ``authorization: Basic base64(user:password)``; the server
answers with the header ``authorization: Bearer <token>``, which the client sends on every
later call. Basic is also accepted on any other call (the bearer comes back the same way).

Everything happens in one ``ServerMiddlewareFactory`` whose ``start_call`` sees every RPC,
Handshake included, before any handler runs: no credentials or bad ones -> UNAUTHENTICATED,
a role below the method's floor -> PERMISSION_DENIED, too many concurrent calls of one user
-> UNAVAILABLE. Handlers then ask ``Authorizer.authorize(context, role)`` for the role
their command needs; the floors here make sure nothing is open even if a handler forgets.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.flight as flight

from flight_server.config import Config
from flight_server.security import roles
from flight_server.security.tokens import InvalidToken, TokenClaims, TokenSigner, load_or_create_keys
from flight_server.security.users import SecurityConfigError, User, load_users, verify_password

logger = logging.getLogger("icefloe.auth")

MIDDLEWARE_KEY = "icefloe.auth"
MAX_AUTH_HEADER_CHARS = 4096

# Least role for each Flight method, checked before any handler runs (see flight_server.security.roles;
# a method the table does not name needs admin).
METHOD_FLOOR: dict[flight.FlightMethod, str] = {
    method: roles.FLIGHT_METHODS.get(name, roles.ADMIN) for name, method in flight.FlightMethod.__members__.items()
    if name != "INVALID"
}

# Flight SQL DoPut commands that write nothing (parameter binding for a query).
_READ_PUT_COMMANDS = frozenset({"type.googleapis.com/arrow.flight.protocol.sql.CommandPreparedStatementQuery"})


def any_type_url(command: bytes) -> str | None:
    """The type URL of a protobuf ``Any`` (its field 1), or None."""
    if len(command) < 2 or command[0] != 0x0A:
        return None
    length, shift, i = 0, 0, 1
    while i < len(command) and i < 6:
        byte = command[i]
        length |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            break
        shift += 7
    else:
        return None
    url = command[i:i + length]
    if len(url) != length:
        return None
    return url.decode("utf-8", "replace")


def put_floor(descriptor: flight.FlightDescriptor) -> str:
    """Least role for a DoPut: "write" unless it binds parameters of a prepared query."""
    if descriptor.descriptor_type == flight.DescriptorType.CMD:
        if any_type_url(descriptor.command or b"") in _READ_PUT_COMMANDS:
            return roles.FLIGHT_COMMANDS["prepared-query-parameters"]
        # every other Flight SQL DoPut writes (update, ingest); handlers ask again precisely
        return roles.FLIGHT_COMMANDS["statement-update"]
    return roles.FLIGHT_COMMANDS["append"]


def action_floor(action_type: str) -> str:
    """Least role of a DoAction, from the roles table (deny by default: unknown = write)."""
    return roles.action_role(action_type)


@dataclass(frozen=True)
class Principal:
    name: str
    role: str

    def allows(self, role: str) -> bool:
        return roles.allows(self.role, role)


class CallLimiter:
    """Counts each user's calls in flight; refuses beyond ``limit`` (0 = no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._active: dict[str, int] = {}

    def acquire(self, user: str) -> bool:
        with self._lock:
            n = self._active.get(user, 0)
            if self.limit and n >= self.limit:
                return False
            self._active[user] = n + 1
            return True

    def release(self, user: str) -> None:
        with self._lock:
            n = self._active.get(user, 0) - 1
            if n > 0:
                self._active[user] = n
            else:
                self._active.pop(user, None)


class AuthMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    def __init__(self, principal: Principal, issued_token: str | None, on_done: Callable[[], None]) -> None:
        self.principal = principal
        self._issued_token = issued_token
        self._on_done = on_done

    def sending_headers(self) -> dict[str, str]:
        if self._issued_token is None:
            return {}
        return {"authorization": f"Bearer {self._issued_token}"}

    def call_completed(self, exception: BaseException | None) -> None:
        self._on_done()


class VerifiedLogins:
    """Recently verified Basic credentials, so a client that sends Basic on every call pays
    the Argon2 verification once per ``ttl_s`` instead of on each call.

    Keys are HMACs (server key) of user, password and the user's current password hash: no
    password is kept, and a changed hash (new password, reload) misses the cache.
    """

    def __init__(self, signer: TokenSigner, ttl_s: float = 300.0, capacity: int = 1024) -> None:
        self._signer = signer
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, float] = OrderedDict()

    def _key(self, user: User, password: str) -> bytes:
        return self._signer.digest(b"basic\x00" + "\x00".join((user.name, password, user.password_hash)).encode())

    def hit(self, user: User, password: str) -> bool:
        key = self._key(user, password)
        with self._lock:
            expires = self._entries.get(key)
            if expires is None:
                return False
            if expires < time.monotonic():
                del self._entries[key]
                return False
            self._entries.move_to_end(key)
            return True

    def add(self, user: User, password: str) -> None:
        key = self._key(user, password)
        with self._lock:
            self._entries[key] = time.monotonic() + self._ttl_s
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


class VerifiedTokens:
    """Bearer tokens whose signature and payload were checked, with their claims.

    A client sends the same token on every call until it is renewed, and ADBC makes four calls
    per query: checking its HMAC and decoding its JSON once is enough. What can change while
    a token is valid is still checked on every call (expiry, the user still existing with the
    same password), and a token is only ever found here by its exact text. Plain dicts: a
    lookup is one atomic operation under the GIL, and the table is emptied when full.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._claims: dict[str, TokenClaims] = {}
        self._fingerprints: dict[str, str] = {}  # password hash -> its fingerprint (an HMAC)

    def claims(self, signer: TokenSigner, token: str) -> TokenClaims:
        """The claims of ``token`` (``TokenSigner.verify``: raises ``InvalidToken``)."""
        claims = self._claims.get(token)
        if claims is None:
            claims = signer.verify(token)
            if len(self._claims) >= self._capacity:
                self._claims.clear()
            self._claims[token] = claims
        elif claims.expires_at <= time.time():
            raise InvalidToken("expired")
        return claims

    def fingerprint(self, signer: TokenSigner, password_hash: str) -> str:
        found = self._fingerprints.get(password_hash)
        if found is None:
            found = signer.password_fingerprint(password_hash)
            if len(self._fingerprints) >= self._capacity:
                self._fingerprints.clear()
            self._fingerprints[password_hash] = found
        return found


class AuthMiddlewareFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, users: dict[str, User], signer: TokenSigner, limiter: CallLimiter) -> None:
        self.users = users
        self.signer = signer
        self.limiter = limiter
        self.verified = VerifiedLogins(signer)
        self.tokens = VerifiedTokens()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> AuthMiddleware:
        principal, issued = self._authenticate(headers)
        floor = METHOD_FLOOR.get(info.method, "admin")
        if not principal.allows(floor):
            raise flight.FlightUnauthorizedError(f"user {principal.name!r} (role {principal.role}) may not call this")
        if not self.limiter.acquire(principal.name):
            logger.warning("user %r refused: %d calls already in flight", principal.name, self.limiter.limit)
            raise flight.FlightUnavailableError(
                f"too many concurrent calls for user {principal.name!r} (limit {self.limiter.limit}); retry later"
            )
        return AuthMiddleware(principal, issued, lambda: self.limiter.release(principal.name))

    def issue_token(self, user: User) -> str:
        """A bearer token for ``user``, the same kind Handshake hands out."""
        return self.signer.issue(user.name, user.password_hash)

    def exchange_token(self, subject_token: str) -> tuple[User, str, int]:
        """A new bearer token for a valid one (the REST token exchange): ``(user, token,
        expires_at)``. It keeps the subject token's login time and session, as Flight's
        renewals do (``TokenSigner.renew``), so exchanging cannot extend a login.

        Raises:
            flight.FlightUnauthenticatedError: The token is bad, expired, revoked, or its
                login is older than the session cap (log in again).
        """
        claims, user = self._verified_bearer(subject_token)
        try:
            token = self.signer.renew(claims, user.password_hash)
            return user, token, self.signer.verify(token).expires_at
        except InvalidToken:
            logger.info("token exchange refused for user %r: login older than the session cap", user.name)
            raise flight.FlightUnauthenticatedError("bearer token's login is too old; log in again") from None

    def principal_for(self, authorization: str | None) -> Principal:
        """The caller named by an ``authorization`` header value (Bearer or Basic).

        Raises:
            flight.FlightUnauthenticatedError: Missing, malformed, bad or expired credentials.
        """
        return self._authenticate({"authorization": [authorization]} if authorization is not None else {})[0]

    def _authenticate(self, headers: dict[str, list[Any]]) -> tuple[Principal, str | None]:
        value = _first_header(headers, "authorization")
        if value is None:
            raise flight.FlightUnauthenticatedError(
                "authentication required: log in with username and password (Basic) or send a bearer token"
            )
        if len(value) > MAX_AUTH_HEADER_CHARS:
            raise flight.FlightUnauthenticatedError("authorization header too long")
        scheme, _, credentials = value.strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            user = self._check_basic(credentials.strip())
            token = self.signer.issue(user.name, user.password_hash)
            return Principal(user.name, user.role), token
        if scheme == "bearer":
            return self._check_bearer(credentials.strip())
        raise flight.FlightUnauthenticatedError("unsupported authorization scheme (use Basic or Bearer)")

    def _check_basic(self, encoded: str) -> User:
        # arrow-go (the ADBC driver) sends unpadded base64 (RawStdEncoding): restore the padding.
        encoded += "=" * (-len(encoded) % 4)
        try:
            decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise flight.FlightUnauthenticatedError("malformed Basic credentials") from None
        name, sep, password = decoded.partition(":")
        if not sep:
            raise flight.FlightUnauthenticatedError("malformed Basic credentials")
        return self.check_password(name, password)

    def check_password(self, name: str, password: str) -> User:
        """The user with this name and password (what Basic and OAuth2 client credentials send).

        Raises:
            flight.FlightUnauthenticatedError: Unknown user or wrong password (one message).
        """
        user = self.users.get(name)
        if user is not None and self.verified.hit(user, password):
            return user
        # verify_password does the same work for an unknown user (no enumeration by timing).
        if not verify_password(user.password_hash if user else None, password) or user is None:
            if user is None:
                logger.warning("login failed: unknown user name")
            else:
                logger.warning("login failed: wrong password for user %r", name)
            raise flight.FlightUnauthenticatedError("invalid username or password")
        self.verified.add(user, password)
        logger.info("login: user %r (role %s)", user.name, user.role)
        return user

    def _check_bearer(self, token: str) -> tuple[Principal, str | None]:
        """The caller, and a renewed token to send back when this one is past half its life."""
        claims, user = self._verified_bearer(token)
        return Principal(user.name, user.role), self.signer.renewal(claims, user.password_hash)

    def _verified_bearer(self, token: str) -> tuple[TokenClaims, User]:
        """The claims of a valid token and its (current) user.

        Raises:
            flight.FlightUnauthenticatedError: Bad, expired or revoked token.
        """
        try:
            claims = self.tokens.claims(self.signer, token)
        except InvalidToken as exc:
            logger.info("bearer token refused: %s", exc)
            reason = "expired; log in again" if str(exc) == "expired" else "invalid"
            raise flight.FlightUnauthenticatedError(f"bearer token {reason}") from None
        user = self.users.get(claims.user)
        fingerprint = self.tokens.fingerprint(self.signer, user.password_hash) if user else ""
        if user is None or not hmac.compare_digest(fingerprint, claims.password_fingerprint):
            logger.info("bearer token refused: user %r removed or password changed", claims.user)
            raise flight.FlightUnauthenticatedError("bearer token revoked; log in again")
        return claims, user


class HandshakeHandler(flight.ServerAuthHandler):  # type: ignore[misc]
    """Handshake itself exchanges nothing: the middleware already checked the Basic header
    and returns the bearer token in the response headers, as Flight SQL clients expect."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        return None

    def is_valid(self, token: bytes) -> str:
        return ""


def _first_header(headers: dict[str, list[Any]], name: str) -> str | None:
    values = headers.get(name)
    if not values:
        return None
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Security:
    """What the server needs: FlightServerBase keyword arguments and a description to log."""

    server_kwargs: dict[str, Any]
    middleware: dict[str, flight.ServerMiddlewareFactory]
    auth: AuthMiddlewareFactory | None  # None: authentication is off
    summary: list[str]
    users_file: str | None = None

    def reload_users(self) -> None:
        """Re-read the users file (on SIGHUP); a bad file keeps the users in force."""
        if self.auth is None or self.users_file is None:
            return
        try:
            users = load_users(self.users_file)
        except SecurityConfigError as exc:
            logger.error("users file not reloaded, the previous users stay in force: %s", exc)
            return
        # One reference swap: each call sees either the old or the new table, never a mix.
        self.auth.users = users
        logger.info("users file reloaded: %d user(s)", len(users))


def build_security(config: Config) -> Security:
    """Validate the security flags and build the pieces; raises SecurityConfigError."""
    kwargs: dict[str, Any] = {}
    summary: list[str] = []
    if bool(config.tls_cert) != bool(config.tls_key):
        raise SecurityConfigError("--tls-cert and --tls-key must be given together")
    if config.tls_client_ca and not config.tls_cert:
        raise SecurityConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    if config.tls_cert and config.tls_key:
        cert, key = _read_pem(config.tls_cert, "--tls-cert"), _read_pem(config.tls_key, "--tls-key")
        kwargs["tls_certificates"] = [flight.CertKeyPair(cert, key)]
        if config.tls_client_ca:
            kwargs["verify_client"] = True
            kwargs["root_certificates"] = _read_pem(config.tls_client_ca, "--tls-client-ca")
            summary.append("TLS on, mutual TLS on (client certificates verified)")
        else:
            summary.append("TLS on")
    else:
        summary.append("TLS off (plaintext gRPC)")

    auth = None
    if config.users_file:
        users = load_users(config.users_file)
        keys, key_file = load_or_create_keys(config.key_folder)
        signer = TokenSigner(keys[0], config.token_ttl_s, old_keys=keys[1:])
        auth = AuthMiddlewareFactory(users, signer, CallLimiter(config.max_calls_per_user))
        kwargs["auth_handler"] = HandshakeHandler()
        persisted = f"signing key in {key_file}, tokens survive restarts" if key_file else \
            "per-process signing key, tokens end with the process"
        if Path(config.users_file).stat().st_mode & 0o077:
            summary.append(f"WARNING: users file {config.users_file} is readable by other users of this machine "
                           "(password hashes can be guessed offline); chmod 600 it")
        if not config.tls_cert and not is_loopback(config.host):
            summary.append("WARNING: authentication without TLS on a non-loopback host: passwords and tokens "
                           "cross the network in clear text; give --tls-cert and --tls-key")
        summary.append(
            f"authentication on: {len(users)} user(s) from {config.users_file}; bearer tokens valid "
            f"{config.token_ttl_s:g}s ({persisted}); at most {config.max_calls_per_user} concurrent calls per user"
        )
    else:
        if not is_loopback(config.host) and not config.allow_remote_without_auth:
            raise SecurityConfigError(
                f"refusing to serve {config.host} without authentication: give --users FILE, "
                "or listen on 127.0.0.1, or pass --allow-remote-without-auth to accept anyone"
            )
        if is_loopback(config.host):
            summary.append("authentication OFF (no --users): listening on loopback only")
        else:
            summary.append("authentication OFF and remote access allowed (--allow-remote-without-auth): "
                           "anyone who can reach this port can read and write every table")
    return Security(kwargs, {MIDDLEWARE_KEY: auth} if auth else {}, auth, summary, config.users_file)


def _read_pem(path: str, flag: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SecurityConfigError(f"{flag} {path} cannot be read: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise SecurityConfigError(f"{flag} {path} is not a PEM file")
    return data
