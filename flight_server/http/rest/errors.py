"""The REST spec's error envelope, and which status each catalog exception gets.

Every error body is ``{"error": {"message", "type", "code"}}`` (the spec's ``ErrorModel``);
``type`` is the exception name Iceberg's clients map back to their own exceptions
(``NoSuchTableException``, ``CommitFailedException``, ...). Messages come from our own code
and never carry a server path or traceback.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from pyiceberg.exceptions import (
    CommitFailedException,
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    TableAlreadyExistsError,
    ValidationException,
    ViewAlreadyExistsError,
)
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from starlette.responses import JSONResponse, Response

from catalog.catalog_errors import MetadataFileMissingError
from catalog.names import InvalidNameError
from catalog.object_store import storage_failure
from catalog.view_updates import InvalidViewVersionError

logger = logging.getLogger("icefloe.http.rest")


class RestError(Exception):
    """An error answered with the spec's ``ErrorModel``.

    Args:
        status: HTTP status code.
        kind: The ``type`` field (an Iceberg exception name).
        message: For the user; no paths, no internals.
    """

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def not_found_table(message: str) -> RestError:
    return RestError(404, "NoSuchTableException", message)


def not_found_namespace(message: str) -> RestError:
    return RestError(404, "NoSuchNamespaceException", message)


def error_response(error: RestError, head: bool = False) -> Response:
    if head:  # a HEAD answer has no body, only the status
        return Response(status_code=error.status)
    body = {"error": {"message": error.message, "type": error.kind, "code": error.status}}
    return JSONResponse(body, status_code=error.status)


def validation_message(exc: ValidationError, what: str = "request body", skip: int = 0) -> str:
    """A user-facing message for pydantic's first complaint (where, and what is wrong)."""
    errors = exc.errors()
    if not errors:
        return f"{what} is invalid"
    where = ".".join(str(part) for part in errors[0]["loc"][skip:])
    return f"{what} is invalid{' at ' + where if where else ''}: {errors[0]['msg']}"


def from_exception(exc: BaseException) -> RestError | None:
    """The REST error for an exception the catalog raises on bad input, or None (a bug)."""
    if isinstance(exc, RestError):
        return exc
    failure = storage_failure(exc)
    if failure is not None:  # the object store failed (after bounded retries): nothing landed
        return RestError(503, "ServiceUnavailableException", failure)
    message = str(exc) or type(exc).__name__
    # Order matters: EmptyNamespaceError is both a NoSuchNamespaceError and an InvalidNameError;
    # a missing metadata file is a NoSuchTableError in-process, Java's NotFoundException here.
    if isinstance(exc, MetadataFileMissingError):
        return RestError(404, "NotFoundException", message)
    if isinstance(exc, NoSuchTableError):
        return not_found_table(message)
    if isinstance(exc, NoSuchNamespaceError):
        return not_found_namespace(message)
    if isinstance(exc, NoSuchViewError):
        return RestError(404, "NoSuchViewException", message)
    if isinstance(exc, (TableAlreadyExistsError, NamespaceAlreadyExistsError, ViewAlreadyExistsError)):
        return RestError(409, "AlreadyExistsException", message)
    if isinstance(exc, NamespaceNotEmptyError):
        return RestError(409, "NamespaceNotEmptyException", message)
    if isinstance(exc, CommitFailedException):
        return RestError(409, "CommitFailedException", message)
    if isinstance(exc, ForbiddenError):
        return RestError(403, "ForbiddenException", message)
    if isinstance(exc, ValidationError):
        return bad_request(validation_message(exc))
    if isinstance(exc, InvalidViewVersionError):
        # Java's error handler turns this type back into IllegalArgumentException.
        return RestError(400, "IllegalArgumentException", message)
    if isinstance(exc, IcebergValidationError):
        # pyiceberg's checks of metadata a client sent ("Unknown format version: 9", a type it
        # cannot parse); not a ValueError, so named here.
        return bad_request(message)
    if isinstance(exc, (InvalidNameError, ValidationException, ValueError)):
        # pyiceberg's own update validation raises ValueError with messages about the
        # metadata (ids, names), never about the server.
        return bad_request(message)
    return None
