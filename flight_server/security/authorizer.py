"""``Authorizer``: the one check every Flight service makes before it acts for a caller.

The auth middleware (``security.auth``) authenticated the call before any handler ran; this
compares the principal it found with the least role the handler needs. Services receive the
authorizer rather than the server, so they depend on this check and nothing else of it.
"""

from __future__ import annotations

import pyarrow.flight as flight

from flight_server import errors
from flight_server.security.auth import MIDDLEWARE_KEY, AuthMiddlewareFactory, Principal


class Authorizer:
    """Role checks of calls; with no ``auth`` (no ``--users``) every call is allowed, anonymously."""

    def __init__(self, auth: AuthMiddlewareFactory | None) -> None:
        self.auth = auth

    def authorize(self, context: flight.ServerCallContext, role: str) -> str | None:
        """Check that the caller may act with ``role`` ("read", "write" or "admin").

        Returns the principal name to record on commits (None when auth is off).

        Raises:
            errors.Unauthenticated: No or bad credentials (when users are configured).
            errors.PermissionDenied: The caller's role is below ``role``.
        """
        if self.auth is None:
            return None
        session = context.get_middleware(MIDDLEWARE_KEY)
        if session is None:
            raise errors.Unauthenticated("authentication required")
        principal: Principal = session.principal
        if not principal.allows(role):
            raise errors.PermissionDenied(
                f"user {principal.name!r} has role {principal.role}; this needs role {role}"
            )
        return principal.name

    def principal_name(self, context: flight.ServerCallContext) -> str | None:
        """The authenticated caller's name, without checking anything (for the query log)."""
        session = context.get_middleware(MIDDLEWARE_KEY) if self.auth is not None else None
        return session.principal.name if session is not None else None
