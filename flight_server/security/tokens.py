"""Signed bearer tokens: ``ifl1.<payload>.<mac>``, HMAC-SHA256 over the payload, with expiry.

The payload is base64url JSON ``{"u": user, "exp": unix_seconds, "pw": fingerprint}``. The
``pw`` fingerprint is an HMAC of the user's current password hash, so changing a password
(or removing the user) revokes the tokens issued before. Tokens name no role: the role is
looked up in the users file on every call, so a demotion takes effect at once.

The signing key lives in ``<warehouse>/.icefloe-token.key`` (created 0600, refused if group-
or world-readable), so tokens survive a server restart. An ``s3://`` warehouse has no local
folder: the key is then random per process and tokens end with the process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flight_server.security.users import SecurityConfigError

logger = logging.getLogger("icefloe.auth")

PREFIX = "ifl1"
KEY_FILE_NAME = ".icefloe-token.key"
MAX_TOKEN_CHARS = 2048


class InvalidToken(Exception):
    """The token is malformed, forged, expired or revoked (message is for the log only)."""


# A token is renewed (a fresh one sent back on a call, or exchanged for over REST) once less
# than half its lifetime is left, but never beyond this long after the password login it
# descends from: a renewed token expires at the latest at login + MAX_SESSION_S.
MAX_SESSION_S = 7 * 24 * 3600


@dataclass(frozen=True)
class TokenClaims:
    user: str
    expires_at: int
    password_fingerprint: str
    login_at: int  # when the user last gave the password (renewals keep it)
    login_id: str  # random per password login, kept by renewals: names the client's session


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    def __init__(self, key: bytes, ttl_s: float, old_keys: Sequence[bytes] = ()) -> None:
        if len(key) < 32 or any(len(k) < 32 for k in old_keys):
            raise SecurityConfigError("the token signing key must be at least 32 bytes")
        self._key = key
        # Retired keys (``rotate_key``) still verify the tokens issued under them.
        self._old_keys = tuple(old_keys)
        self.ttl_s = ttl_s

    def digest(self, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` under the signing key (for keys that must not reveal data)."""
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def password_fingerprint(self, password_hash: str) -> str:
        return _b64(hmac.new(self._key, b"pw\x00" + password_hash.encode(), hashlib.sha256).digest()[:12])

    def issue(self, user: str, password_hash: str, now: float | None = None, login_at: int | None = None,
              login_id: str | None = None, expires_at: int | None = None) -> str:
        now = time.time() if now is None else now
        exp = int(now + self.ttl_s) if expires_at is None else min(int(now + self.ttl_s), expires_at)
        payload = {"u": user, "exp": exp, "pw": self.password_fingerprint(password_hash),
                   "at": int(now) if login_at is None else login_at,
                   "sid": login_id or _b64(secrets.token_bytes(9))}
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{PREFIX}.{body}.{self._mac(body)}"

    def verify(self, token: str, now: float | None = None) -> TokenClaims:
        """Check signature and expiry. The password fingerprint is checked by the caller."""
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken("token too long")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != PREFIX:
            raise InvalidToken("not an icefloe token")
        _, body, mac = parts
        if not any(hmac.compare_digest(self._mac(body, key).encode(), mac.encode())
                   for key in (self._key, *self._old_keys)):
            raise InvalidToken("bad signature")
        try:
            payload = json.loads(_unb64(body))
            claims = TokenClaims(str(payload["u"]), int(payload["exp"]), str(payload["pw"]), int(payload["at"]),
                                 str(payload["sid"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise InvalidToken("malformed payload") from None
        if claims.expires_at <= (time.time() if now is None else now):
            raise InvalidToken("expired")
        return claims

    def renewal(self, claims: TokenClaims, password_hash: str, now: float | None = None) -> str | None:
        """A fresh token for a valid one past half its lifetime (None: not due, or session too old)."""
        now = time.time() if now is None else now
        if claims.expires_at - now > self.ttl_s / 2:
            return None
        try:
            return self.renew(claims, password_hash, now)
        except InvalidToken:
            return None

    def renew(self, claims: TokenClaims, password_hash: str, now: float | None = None) -> str:
        """A fresh token of the same login as ``claims`` (verified by the caller): same login
        time and session id, expiring at the latest ``MAX_SESSION_S`` after that login, so no
        chain of renewals (Flight's, or the REST token exchange) outlives it.

        Raises:
            InvalidToken: The login is ``MAX_SESSION_S`` old or older (log in again).
        """
        now = time.time() if now is None else now
        session_end = claims.login_at + MAX_SESSION_S
        if now >= session_end:
            raise InvalidToken("session too old")
        return self.issue(claims.user, password_hash, now, login_at=claims.login_at, login_id=claims.login_id,
                          expires_at=session_end)

    def _mac(self, body: str, key: bytes | None = None) -> str:
        return _b64(hmac.new(key or self._key, f"{PREFIX}.{body}".encode(), hashlib.sha256).digest())


def session_identity(token: str) -> str:
    """What stays the same across a token's renewals (user and login id), to key per-client
    state such as Flight SQL sessions. Not a check: the auth middleware verifies the token on
    the same call. Tokens that are not icefloe's name themselves."""
    parts = token.split(".")
    if len(parts) == 3 and parts[0] == PREFIX and len(token) <= MAX_TOKEN_CHARS:
        try:
            payload = json.loads(_unb64(parts[1]))
            return f"{PREFIX}:{payload['u']}:{payload['sid']}"
        except (ValueError, KeyError, TypeError, binascii.Error):
            pass
    return token


def load_or_create_keys(warehouse: str) -> tuple[list[bytes], str | None]:
    """Every signing key of the warehouse, current first, and the file they are kept in.

    The file holds one hex key per line: the first signs, the others still verify (they are
    the keys ``rotate_key`` retired, kept so that tokens and handles already given out stay
    valid until they expire). None as the file: an ``s3://`` warehouse, random per process.
    """
    if "://" in warehouse and not warehouse.startswith("file://"):
        return [secrets.token_bytes(32)], None
    folder = Path(warehouse.removeprefix("file://"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / KEY_FILE_NAME
    if not path.exists():
        _create_key_file(path)
    return _read_keys(path), str(path)


def _read_keys(path: Path) -> list[bytes]:
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecurityConfigError(
            f"token key file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
            "run `chmod 600` on it or delete it (existing tokens then become invalid)"
        )
    try:
        keys = [bytes.fromhex(line.strip()) for line in path.read_text().splitlines() if line.strip()]
    except ValueError:
        raise SecurityConfigError(f"token key file {path} is corrupt; delete it to make a new one") from None
    if not keys or any(len(k) < 32 for k in keys):
        raise SecurityConfigError(f"token key file {path} is too short; delete it to make a new one")
    return keys


def rotate_key(warehouse: str, keep: int = 1, catalog_path: str | None = None) -> str:
    """Make a new current signing key; keep the ``keep`` newest old keys for verification.

    The key file is in the warehouse folder, or, for an object-store warehouse, in its
    ``catalog_path`` folder (where the servers of that catalog read it: ``Config.key_folder``).

    Servers read the keys when they start: restart them (one at a time) after a rotation.
    Returns the key file's path.
    """
    if "://" in warehouse and not warehouse.startswith("file://"):
        if catalog_path is None:
            raise SecurityConfigError(
                "an s3:// warehouse keeps its signing keys in its catalog folder: "
                "pass the servers' --catalog-path (ICEFLOE_CATALOG_PATH)"
            )
        warehouse = catalog_path
    folder = Path(warehouse.removeprefix("file://"))
    if not folder.is_dir():
        raise SecurityConfigError(f"{folder} is not a folder: pass the warehouse (or --catalog-path) the servers use")
    path = folder / KEY_FILE_NAME
    old = _read_keys(path) if path.exists() else []
    lines = [secrets.token_hex(32)] + [k.hex() for k in old[: max(keep, 0)]]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.rotate")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    logger.info("rotated the signing key in %s (%d old key(s) still verify)", path, len(lines) - 1)
    return str(path)


def _create_key_file(path: Path) -> None:
    # Write under a temporary name with 0600 from the start, fsync, then publish by link():
    # a concurrent starter either wins or sees the complete file, never a partial key.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        logger.info("created token signing key %s", path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
