"""Signed handles: every ticket and handle the server gives a client comes back authenticated.

A client holds statement tickets, metadata tickets and prepared-statement handles between
calls and sends them back; all of them are hostile bytes until proven ours. Each is sealed as

    ``icefloe.<purpose>.v2:`` + base64url(HMAC-SHA256(key, purpose NUL body)) + ``:`` + body

and ``open`` checks the exact bytes before anything else reads the body. The purpose is part
of the MAC, so a prepared-statement handle cannot pass for a statement ticket.

The key is derived from the warehouse's signing key file (``tokens.load_or_create_keys``), so
every server on the same warehouse can open every handle (handles stay stateless). The file
may list several keys: the first signs, all of them verify, which is how a key is rotated
(``icefloe rotate-key``) without breaking the handles clients already hold.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from flight_server import errors

_DERIVE_LABEL = b"icefloe handle signing v2"
_MAC_CHARS = 43  # base64url of 32 bytes, unpadded


class HandleSigner:
    """Seals and opens handles under the warehouse keys (first signs, all verify)."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise ValueError("a handle signer needs at least one key")
        self._keys = [hmac.new(k, _DERIVE_LABEL, hashlib.sha256).digest() for k in keys]

    def seal(self, purpose: str, body: bytes) -> bytes:
        """``body`` with a MAC over purpose and body, ready to give to a client."""
        return _prefix(purpose) + self._mac(self._keys[0], purpose, body) + b":" + body

    def open(self, purpose: str, data: bytes, what: str) -> bytes:
        """The body of a sealed handle, after checking its MAC.

        Raises:
            errors.InvalidArgument: ``data`` is not a handle of this purpose signed by a key
                of this warehouse (unsigned, altered, truncated, or from elsewhere).
        """
        prefix = _prefix(purpose)
        if not data.startswith(prefix) or len(data) < len(prefix) + _MAC_CHARS + 1:
            raise errors.InvalidArgument(
                f"not an icefloe {what} (send it back exactly as the server issued it)"
            )
        mac = data[len(prefix) : len(prefix) + _MAC_CHARS]
        if data[len(prefix) + _MAC_CHARS : len(prefix) + _MAC_CHARS + 1] != b":":
            raise errors.InvalidArgument(f"malformed {what}")
        body = data[len(prefix) + _MAC_CHARS + 1 :]
        for key in self._keys:
            if hmac.compare_digest(mac, self._mac(key, purpose, body)):
                return body
        raise errors.InvalidArgument(
            f"{what} is not signed by this warehouse's servers (altered, forged, or its key was retired)"
        )

    @staticmethod
    def _mac(key: bytes, purpose: str, body: bytes) -> bytes:
        # hmac.digest: OpenSSL's one-shot HMAC, without building an HMAC object (five MACs
        # per ADBC query: two seals, three opens).
        digest = hmac.digest(key, purpose.encode() + b"\x00" + body, "sha256")
        return base64.urlsafe_b64encode(digest).rstrip(b"=")


def _prefix(purpose: str) -> bytes:
    return f"icefloe.{purpose}.v2:".encode()
