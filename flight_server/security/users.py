"""Users file (``--users FILE``) and password hashing (``icefloe passwd``).

The file is TOML::

    [users.alice]
    role = "admin"                 # read | write | admin
    password_hash = "$argon2id$v=19$m=65536,t=3,p=4$..."

Passwords are hashed with Argon2id (argon2-cffi's defaults, RFC 9106's low-memory profile:
t=3, m=64 MiB, p=4). Argon2id is memory-hard, which makes GPU guessing of a stolen users file
costly, and its PHC string carries the salt and the parameters, so the file needs no other
field and stronger parameters later still verify old hashes. (hashlib.scrypt would also do;
argon2-cffi is a well-kept binding of the reference implementation and is already a
dependency.)
"""

from __future__ import annotations

import logging
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

logger = logging.getLogger("icefloe.auth")

ROLES: tuple[str, ...] = ("read", "write", "admin")
ROLE_RANK: dict[str, int] = {role: rank for rank, role in enumerate(ROLES)}

_hasher = PasswordHasher()
# Verifying costs ~64 MiB and tens of milliseconds; bound how many run at once so a flood of
# Basic logins cannot exhaust the server's memory (the rest wait their turn).
_verify_slots = threading.BoundedSemaphore(2)


class SecurityConfigError(ValueError):
    """A security setting cannot be used (bad users file, missing certificate, ...)."""


@dataclass(frozen=True)
class User:
    name: str
    role: str
    password_hash: str


def hash_password(password: str) -> str:
    """A salted Argon2id hash in PHC string form (what ``icefloe passwd`` prints)."""
    if not password:
        raise ValueError("the password is empty")
    return _hasher.hash(password)


# Compared against when the user name is unknown, so that an unknown user takes as long to
# refuse as a wrong password (no user enumeration by timing).
_DUMMY_HASH = _hasher.hash("icefloe-no-such-user")


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when ``password`` matches; constant work whether or not the user exists."""
    with _verify_slots:
        try:
            return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False


def load_users(path: str | Path) -> dict[str, User]:
    """Read and validate a users file. Messages name the file and the user, never a hash."""
    file = Path(path)
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise SecurityConfigError(f"users file {file} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SecurityConfigError(f"users file {file} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise SecurityConfigError(f"users file {file} cannot be read: {exc.strerror}") from None
    table = doc.get("users")
    if not isinstance(table, dict) or not table:
        raise SecurityConfigError(f"users file {file} defines no users (expected [users.NAME] tables)")
    unknown_top = set(doc) - {"users"}
    if unknown_top:
        raise SecurityConfigError(f"users file {file}: unknown top-level keys {sorted(unknown_top)}")
    users: dict[str, User] = {}
    for name, entry in table.items():
        where = f"users file {file}, user {name!r}"
        if not isinstance(entry, dict):
            raise SecurityConfigError(f"{where}: expected a table with role and password_hash")
        if not name or ":" in name or any(ch.isspace() or not ch.isprintable() for ch in name):
            raise SecurityConfigError(f"{where}: a user name must be non-empty, printable, without ':' or spaces")
        extra = set(entry) - {"role", "password_hash"}
        if extra:
            raise SecurityConfigError(f"{where}: unknown keys {sorted(extra)}")
        role = entry.get("role")
        if role not in ROLE_RANK:
            raise SecurityConfigError(f"{where}: role must be one of {', '.join(ROLES)}")
        pw_hash = entry.get("password_hash")
        if not isinstance(pw_hash, str) or not pw_hash.startswith("$argon2"):
            raise SecurityConfigError(f"{where}: password_hash must be an Argon2 hash printed by `icefloe passwd`")
        users[name] = User(name=name, role=role, password_hash=pw_hash)
    return users


def read_password_from_stdin() -> str:
    """The password for ``icefloe passwd``: prompted twice on a terminal, else one stdin line."""
    if sys.stdin.isatty():
        import getpass

        first = getpass.getpass("Password: ")
        if getpass.getpass("Repeat password: ") != first:
            raise ValueError("the passwords do not match")
        return first
    line = sys.stdin.readline()
    return line.removesuffix("\n").removesuffix("\r")
