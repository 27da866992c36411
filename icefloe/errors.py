"""One error hierarchy for both backends.

Every failure an ``icefloe`` call reports is an ``icefloe.Error`` subclass, whether it came
from the in-process catalog (pyiceberg / catalog exceptions) or from a server (gRPC status
codes; pyarrow.flight cannot send every code, so the server prefixes some messages with the
intended code name, see ``flight_server.errors``). Both sides are reduced to a gRPC code
name first and then to one class, so the two backends cannot drift apart.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.flight as flight


class Error(Exception):
    """Base class of every error the icefloe API raises. ``code`` is the gRPC status name."""

    code = "UNKNOWN"


class InvalidArgument(Error):
    """Malformed input: a bad name, SQL filter, schema mismatch, idempotency key."""

    code = "INVALID_ARGUMENT"


class NotFound(Error):
    """The namespace or table does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(Error):
    """The namespace or table exists already."""

    code = "ALREADY_EXISTS"


class Conflict(Error):
    """A commit lost to a concurrent change (after retries), or the state does not allow it."""

    code = "ABORTED"


class CursorExpired(Error):
    """A commit cursor is older than the retained log (or its rows are no longer kept)."""

    code = "OUT_OF_RANGE"


class PermissionDenied(Error):
    """The principal may not do this, or the lake is open read-only."""

    code = "PERMISSION_DENIED"


class ReadOnly(PermissionDenied):
    """A write to a lake opened in-process while a server holds the warehouse."""


class Unauthenticated(Error):
    """No or invalid credentials."""

    code = "UNAUTHENTICATED"


class Unavailable(Error):
    """The server cannot be reached or is shutting down (retryable)."""

    code = "UNAVAILABLE"


class CheckpointLost(Error):
    """A pipe's checkpoint is gone from the sink's retained snapshots although it committed before."""

    code = "FAILED_PRECONDITION"


_BY_CODE: dict[str, type[Error]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "ABORTED": Conflict,
    "FAILED_PRECONDITION": Conflict,
    "OUT_OF_RANGE": CursorExpired,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAUTHENTICATED": Unauthenticated,
    "UNAVAILABLE": Unavailable,
    "RESOURCE_EXHAUSTED": Unavailable,
    "DEADLINE_EXCEEDED": Unavailable,
}
_PREFIX = re.compile(r"^(ALREADY_EXISTS|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE|RESOURCE_EXHAUSTED): ?")


def error_for(code: str, message: str) -> Error:
    """The hierarchy's exception for a gRPC code name."""
    if "cursor expired" in message:
        return CursorExpired(message)
    return _BY_CODE.get(code, Error)(message)


def clean_message(text: str) -> str:
    """A server message without gRPC's debug context or pyarrow's wrapping."""
    for cut in (". Detail:", ". gRPC client debug context", "\ngRPC client debug context"):
        text = text.split(cut, 1)[0]
    return re.sub(r"^Flight returned \w+ error, with message: ", "", text.strip())


def from_remote(exc: BaseException) -> Error:
    """Map a pyarrow.flight / Arrow exception raised by a server call."""
    message = clean_message(str(exc)) or type(exc).__name__
    found = _PREFIX.match(message)
    if found is not None:
        return error_for(found.group(1), message[found.end():])
    if isinstance(exc, flight.FlightUnauthenticatedError):
        code = "UNAUTHENTICATED"
    elif isinstance(exc, flight.FlightUnauthorizedError):
        code = "PERMISSION_DENIED"
    elif isinstance(exc, (flight.FlightUnavailableError, flight.FlightTimedOutError)):
        code = "UNAVAILABLE"
    elif isinstance(exc, flight.FlightCancelledError):
        code = "CANCELLED"
    elif isinstance(exc, pa.ArrowKeyError):
        code = "NOT_FOUND"
    elif isinstance(exc, pa.ArrowNotImplementedError):
        code = "UNIMPLEMENTED"
    elif isinstance(exc, pa.ArrowInvalid):
        code = "INVALID_ARGUMENT"
    else:
        code = "UNKNOWN"
    return error_for(code, message)


def from_local(exc: BaseException) -> Error:
    """Map an exception of the in-process catalog, appender or change scans."""
    from catalog import CatalogReadOnlyError
    from catalog.pipes import InvalidPipeCommit
    from catalog.schema_policy import SchemaMismatchError
    from flight_server import errors as server_errors

    if isinstance(exc, Error):
        return exc
    if isinstance(exc, CatalogReadOnlyError):
        return ReadOnly(str(exc))
    if isinstance(exc, (SchemaMismatchError, InvalidPipeCommit)):
        return InvalidArgument(str(exc))
    if isinstance(exc, server_errors.IcefloeError):
        return error_for(exc.code, str(exc))
    code, message = server_errors.classify(exc)
    if code == "INTERNAL":
        if isinstance(exc, ValueError):  # idempotency keys, names, properties
            return InvalidArgument(str(exc))
        return Error(f"{type(exc).__name__}: {exc}")
    return error_for(code, message)
