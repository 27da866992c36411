"""DuckDB errors as client errors: the right status, and a message that gives nothing away.

DuckDB's messages are written for someone at the console of the machine: they name files and
folders (its extension and secret directories under the server's home, the spill folder),
and a missing name gets a "Did you mean ..." hint drawn from everything in its catalog,
including its own internal views (``sqlite_temp_schema``, ``pg_enum``) and icefloe's internal
relations. Every message is rewritten here before it leaves: server paths become ``<path>``,
hints that name internal objects are dropped.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading

import duckdb

from flight_server import errors

_MAX_MESSAGE = 2000
_private_paths: set[str] = set()
_lock = threading.Lock()
# An absolute path: a slash-led run of path characters with at least two components, not part
# of a URL (``scheme://...`` is left alone) or of a word.
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~])(?:~|/)(?:[\w.\-+@]+/)+[\w.\-+@]*")
_HINT = re.compile(r'\s*Did you mean "([^"]*)"\??')
# Objects of DuckDB's own catalog and of icefloe's plumbing, never to be suggested to a client.
_INTERNAL_NAME = re.compile(
    r"^(?:(?:system|temp|memory|main|pg_catalog|information_schema)\.)?"
    r"(?:pg_|sqlite_|duckdb_|__icefloe|information_schema|pragma_|character_sets|check_constraints|columns$|"
    r"constraint_|key_column_usage|referential_constraints|schemata|table_constraints|tables$|views$|"
    r"memory$|system$|temp$|main$)",
    re.IGNORECASE,
)


def register_private_path(path: str) -> None:
    """A server path that must never appear in a client message (warehouse, spill folder, ...)."""
    if path and len(path) > 1:
        with _lock:
            _private_paths.add(os.path.abspath(path))


def _known_paths() -> list[str]:
    paths = {os.path.expanduser("~"), os.getcwd(), tempfile.gettempdir(), sys.prefix, sys.base_prefix}
    with _lock:
        paths |= _private_paths
    # Longest first, so a folder inside another is replaced whole.
    return sorted((p for p in paths if p and p != "/"), key=len, reverse=True)


def scrub(message: str) -> str:
    """``message`` without server paths or hints that name internal objects."""
    for path in _known_paths():
        message = message.replace(path, "<path>")
    message = _ABSOLUTE_PATH.sub("<path>", message)

    def hint(match: re.Match[str]) -> str:
        return "" if _INTERNAL_NAME.match(match.group(1)) else match.group(0)

    message = _HINT.sub(hint, message)
    message = re.sub(r"__icefloe_\w+", "<internal>", message)
    return message


def clean(exc: BaseException) -> str:
    """A DuckDB message fit for a client: scrubbed, at most one screen long."""
    text = scrub(str(exc).strip())
    return text if len(text) < _MAX_MESSAGE else text[:_MAX_MESSAGE] + "..."


def map_duckdb(exc: duckdb.Error) -> Exception:
    """The client error for a DuckDB exception."""
    msg = clean(exc)
    if isinstance(exc, duckdb.InterruptException):
        return errors.Cancelled("query interrupted")
    if isinstance(exc, duckdb.PermissionException):
        return errors.PermissionDenied("not allowed in icefloe SQL: " + msg.split("Permission Error: ", 1)[-1])
    if isinstance(exc, duckdb.CatalogException):
        return errors.NotFound(msg)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return errors.ResourceExhausted(msg)
    return errors.InvalidArgument(msg)
