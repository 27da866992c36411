"""Errors for clients: precise gRPC status codes, user-facing messages, no tracebacks.

Handlers raise the ``IcefloeError`` subclasses below (or let catalog / engine exceptions
escape); the server's RPC entry points pass every exception through ``to_flight_error`` so
that what reaches gRPC is deliberate.

pyarrow.flight appends the Python traceback to the status message of any exception that is
not one of its ``FlightError`` types. Codes that pyarrow has a ``FlightError`` for
(UNAUTHENTICATED, PERMISSION_DENIED, CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL)
are raised as those. INVALID_ARGUMENT, NOT_FOUND and UNIMPLEMENTED can only be reached through
Arrow status codes (``ArrowInvalid``, ``ArrowKeyError``, ``ArrowNotImplementedError``), which
carry a traceback "detail"; ``install_clean_tracebacks`` makes that detail print just the
exception's class name for our own errors.

What pyarrow 26 cannot express (measured with a raw gRPC client against a pyarrow server):
ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE and RESOURCE_EXHAUSTED have no
exception that reaches them; ``ArrowIndexError`` / ``ArrowCapacityError`` / ``ArrowIOError``
all arrive as UNKNOWN. So ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED and OUT_OF_RANGE are
sent as INVALID_ARGUMENT and RESOURCE_EXHAUSTED as UNAVAILABLE (retryable, as it is meant),
and each of those messages starts with the intended code name (``"ALREADY_EXISTS: ..."``) so
clients can still tell them apart.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.flight as flight

logger = logging.getLogger("icefloe.errors")


class IcefloeError(Exception):
    """An error meant for the client. ``code`` is the gRPC status name."""

    code = "INTERNAL"


class InvalidArgument(IcefloeError):
    code = "INVALID_ARGUMENT"


class NotFound(IcefloeError):
    code = "NOT_FOUND"


class AlreadyExists(IcefloeError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(IcefloeError):
    code = "FAILED_PRECONDITION"


class Aborted(IcefloeError):
    code = "ABORTED"


class OutOfRange(IcefloeError):
    code = "OUT_OF_RANGE"


class Unimplemented(IcefloeError):
    code = "UNIMPLEMENTED"


class Unauthenticated(IcefloeError):
    code = "UNAUTHENTICATED"


class PermissionDenied(IcefloeError):
    code = "PERMISSION_DENIED"


class Cancelled(IcefloeError):
    code = "CANCELLED"


class DeadlineExceeded(IcefloeError):
    code = "DEADLINE_EXCEEDED"


class ResourceExhausted(IcefloeError):
    code = "RESOURCE_EXHAUSTED"


class Unavailable(IcefloeError):
    code = "UNAVAILABLE"


_FLIGHT_NATIVE: dict[str, type[Exception]] = {
    "UNAUTHENTICATED": flight.FlightUnauthenticatedError,
    "PERMISSION_DENIED": flight.FlightUnauthorizedError,
    "CANCELLED": flight.FlightCancelledError,
    "DEADLINE_EXCEEDED": flight.FlightTimedOutError,
    "UNAVAILABLE": flight.FlightUnavailableError,
    "INTERNAL": flight.FlightInternalError,
    "RESOURCE_EXHAUSTED": flight.FlightUnavailableError,  # see the module docstring
}

# Arrow status codes that the gRPC transport turns into the wanted gRPC code.
_ARROW_STATUS: dict[str, type[Exception]] = {
    "INVALID_ARGUMENT": pa.ArrowInvalid,
    "NOT_FOUND": pa.ArrowKeyError,
    "UNIMPLEMENTED": pa.ArrowNotImplementedError,
    "ALREADY_EXISTS": pa.ArrowInvalid,
    "OUT_OF_RANGE": pa.ArrowInvalid,
    "FAILED_PRECONDITION": pa.ArrowInvalid,
    "ABORTED": pa.ArrowInvalid,
}
# Codes sent as another code: their messages name the intended one.
_APPROXIMATED = {"ALREADY_EXISTS", "OUT_OF_RANGE", "FAILED_PRECONDITION", "ABORTED", "RESOURCE_EXHAUSTED"}

_CLEAN_ATTR = "_icefloe_clean"
# What a clean "detail" names for an Arrow status class: the gRPC code, never the Arrow class
# (ArrowKeyError's "KeyError" read to clients as a server bug, not as "no such snapshot").
_DETAIL_OF_ARROW = {pa.ArrowKeyError: "NOT_FOUND", pa.ArrowInvalid: "INVALID_ARGUMENT",
                    pa.ArrowNotImplementedError: "UNIMPLEMENTED"}


def _detail_name(code: str) -> str:
    """``NOT_FOUND`` as ``NotFound``: the name a clean traceback "detail" shows."""
    return "".join(part.capitalize() for part in code.split("_"))


def clean_copy(exc: BaseException, message: str) -> BaseException:
    """An exception of ``exc``'s own type with ``message``, whose traceback "detail" shows only
    the class name (for Arrow errors re-raised from Python, e.g. by a wrapping generator).
    ``exc`` itself when its type cannot be built from a message."""
    try:
        copy = type(exc)(message)
    except Exception:  # an exception type with another constructor: keep the original
        return exc
    code = next((c for cls, c in _DETAIL_OF_ARROW.items() if isinstance(copy, cls)), None)
    setattr(copy, _CLEAN_ATTR, _detail_name(code) if code else type(copy).__name__.removeprefix("Arrow"))
    return copy


def first_line(exc: BaseException) -> str:
    """An exception's first message line (Arrow appends C++ source locations after it), or
    its class name when it has no message: what a client may see of a library error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def to_flight_error(exc: BaseException) -> BaseException:
    """Map any exception to the exception pyarrow.flight should raise for it."""
    if isinstance(exc, flight.FlightError):
        already: BaseException = exc  # pyarrow.flight is untyped: keep the declared type
        return already
    if isinstance(exc, IcefloeError):
        code, message = exc.code, str(exc)
    else:
        code, message = classify(exc)
    if code == "INTERNAL":
        logger.error("internal error", exc_info=exc)
        message = "internal error (see the server log)"
    if code in _APPROXIMATED and not message.startswith(code):
        message = f"{code}: {message}"
    native = _FLIGHT_NATIVE.get(code)
    if native is not None:
        flight_error: BaseException = native(message)
        return flight_error
    arrow_cls = _ARROW_STATUS.get(code, pa.ArrowInvalid)
    mapped: BaseException = arrow_cls(message)
    setattr(mapped, _CLEAN_ATTR, _detail_name(code))
    return mapped


def classify(exc: BaseException) -> tuple[str, str]:
    """gRPC code and message for exceptions raised by the catalog and libraries."""
    from pyiceberg import exceptions as ice

    from catalog import CatalogReadOnlyError, CursorExpiredError, TooManySubscribersError
    from catalog.expectations import ExpectationUnusable, QualityBlocked
    from catalog.maintenance_worker import WorkerDied
    from catalog.names import InvalidNameError
    from catalog.object_store import storage_failure
    from catalog.sandbox import InvalidLocationError, OutsideTableError
    from catalog.v3 import UnsupportedFormatError

    if isinstance(exc, QualityBlocked):  # rows failed a table's block expectation
        return "INVALID_ARGUMENT", str(exc)
    if isinstance(exc, ExpectationUnusable):  # the table's expectation itself is broken
        return "FAILED_PRECONDITION", str(exc)
    if isinstance(exc, OutsideTableError):  # a file outside the table's folder (catalog.sandbox)
        return "PERMISSION_DENIED", str(exc)
    if isinstance(exc, InvalidLocationError):  # a client named such a file or folder
        return "INVALID_ARGUMENT", str(exc)
    if isinstance(exc, UnsupportedFormatError):  # an icefloe write to a format v3 table
        return "INVALID_ARGUMENT", str(exc)
    if isinstance(exc, InvalidNameError):
        # First: an empty namespace (EmptyNamespaceError) is also a NoSuchNamespaceError, as
        # pyiceberg's catalogs answer; to a client it is a bad name, not a missing one.
        return "INVALID_ARGUMENT", str(exc)
    if isinstance(exc, (ice.NoSuchTableError, ice.NoSuchNamespaceError, ice.NoSuchViewError)):
        return "NOT_FOUND", str(exc)
    if isinstance(exc, (ice.TableAlreadyExistsError, ice.NamespaceAlreadyExistsError)):
        return "ALREADY_EXISTS", str(exc)
    if isinstance(exc, ice.NamespaceNotEmptyError):
        return "FAILED_PRECONDITION", str(exc)
    if isinstance(exc, ice.CommitFailedException):
        return "ABORTED", str(exc)
    if isinstance(exc, CatalogReadOnlyError):
        return "FAILED_PRECONDITION", str(exc)
    if isinstance(exc, CursorExpiredError):
        return "OUT_OF_RANGE", str(exc)
    if isinstance(exc, TooManySubscribersError):
        return "RESOURCE_EXHAUSTED", str(exc)
    failure = storage_failure(exc)
    if failure is not None:  # S3 down, 5xx or timing out after the bounded retries
        return "UNAVAILABLE", failure
    if isinstance(exc, WorkerDied):
        # Closed at shutdown, or killed: the work is not committed and may be retried.
        return "UNAVAILABLE", f"maintenance did not finish: {exc}; retry"
    return "INTERNAL", str(exc)


_FLIGHT_CODES: tuple[tuple[type[Exception], str], ...] = (
    (flight.FlightUnauthenticatedError, "UNAUTHENTICATED"),
    (flight.FlightUnauthorizedError, "PERMISSION_DENIED"),
    (flight.FlightCancelledError, "CANCELLED"),
    (flight.FlightTimedOutError, "DEADLINE_EXCEEDED"),
    (flight.FlightUnavailableError, "UNAVAILABLE"),
)


def status_of(exc: BaseException) -> str:
    """The gRPC status name an exception stands for (as ``to_flight_error`` maps it), for
    metrics and the query log."""
    if isinstance(exc, IcefloeError):
        return exc.code
    if isinstance(exc, flight.FlightError):
        for cls, code in _FLIGHT_CODES:
            if isinstance(exc, cls):
                return code
        return "INTERNAL"
    return classify(exc)[0]


def raise_for_flight(exc: Exception) -> NoReturn:
    """Re-raise ``exc`` as pyarrow.flight should see it (``to_flight_error``); call it from
    the ``except`` block that caught ``exc``."""
    mapped = to_flight_error(exc)
    if mapped is exc:
        raise exc
    raise mapped from None


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for RPC entry points: every exception leaves through ``to_flight_error``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # deliberately total: nothing unmapped reaches gRPC
            raise_for_flight(exc)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


_installed = False


def install_clean_tracebacks() -> None:
    """Make pyarrow's traceback "detail" for our mapped errors show only the message."""
    global _installed
    if _installed:
        return
    original = traceback.format_exception

    def format_exception(exc: Any, *args: Any, **kwargs: Any) -> list[str]:
        value = exc if isinstance(exc, BaseException) else (args[0] if args else None)
        detail = getattr(value, _CLEAN_ATTR, None) if value is not None else None
        if detail:
            return [str(detail)]
        return original(exc, *args, **kwargs)

    traceback.format_exception = format_exception
    _installed = True
