"""One REST call as the handlers see it, and the decoding every handler shares.

Names reach the handlers already decoded and checked: path segments are percent-decoded one
by one from the *raw* path (so ``%2F`` stays inside a name instead of splitting the path),
namespace levels are split on the spec's unit separator (``%1F``), and every level and table
name passes the catalog's own name check (no ``/``, ``.``, NUL, control characters...).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.names import InvalidNameError, check_name, check_namespace
from flight_server.http.rest.errors import bad_request
from flight_server.security.auth import Principal

NAMESPACE_SEPARATOR = "\x1f"
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass
class Call:
    """A decoded REST call."""

    method: str
    params: dict[str, str]  # named path parts, decoded: "namespace", "table"
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    principal: Principal | None
    extra: dict[str, Any] = field(default_factory=dict)  # commit-log details of the client

    def json(self) -> dict[str, Any]:
        """The body as a JSON object.

        Raises:
            RestError: 400 for an empty body, invalid JSON, or JSON that is not an object.
        """
        if not self.body:
            raise bad_request("request body is empty; a JSON object is expected")
        try:
            value = json.loads(self.body)
        except UnicodeDecodeError:
            raise bad_request("request body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise bad_request(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
                from None
        except (RecursionError, ValueError):  # nesting too deep, or an integer of >4300 digits
            raise bad_request("request body is not valid JSON (nested too deeply or a number too long)") from None
        if not isinstance(value, dict):
            raise bad_request("request body must be a JSON object")
        return value

    @property
    def namespace(self) -> tuple[str, ...]:
        return namespace_from_path(self.params["namespace"])

    @property
    def table(self) -> tuple[tuple[str, ...], str]:
        return self.namespace, name_from_path(self.params["table"])

    @property
    def view(self) -> tuple[tuple[str, ...], str]:
        return self.namespace, checked_name(self.params["view"], "view")

    def flag(self, name: str) -> bool:
        """A boolean query parameter (absent = false).

        Raises:
            RestError: 400 for a value other than true / false.
        """
        raw = self.query.get(name)
        if raw is None:
            return False
        if raw.lower() not in ("true", "false"):
            raise bad_request(f"query parameter {name} must be true or false")
        return raw.lower() == "true"


def _checked_levels(levels: Sequence[Any]) -> tuple[str, ...]:
    if not all(isinstance(level, str) for level in levels):
        raise bad_request("namespace levels must be strings")
    try:
        return check_namespace(tuple(levels))
    except InvalidNameError as exc:
        raise bad_request(str(exc)) from None


def namespace_from_path(segment: str) -> tuple[str, ...]:
    """Namespace levels of a path segment (levels joined by the unit separator)."""
    return _checked_levels(segment.split(NAMESPACE_SEPARATOR))


def name_from_path(segment: str) -> str:
    return checked_name(segment, "table")


def checked_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise bad_request(f"{what} name must be a string")
    try:
        return check_name(name, what)
    except InvalidNameError as exc:
        raise bad_request(str(exc)) from None


def namespace_from_json(value: Any, what: str = "namespace") -> tuple[str, ...]:
    if not isinstance(value, list):
        raise bad_request(f"{what} must be a JSON array of level names")
    return _checked_levels(value)


def identifier_from_json(value: Any, what: str) -> tuple[tuple[str, ...], str]:
    """A ``TableIdentifier`` object: ``{"namespace": [...], "name": "..."}``."""
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be an object with namespace and name")
    return namespace_from_json(value.get("namespace"), f"{what}.namespace"), checked_name(value.get("name"), "table")


def properties_from_json(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise bad_request(f"{what} must be an object of string keys and string values")
    return value


def page(items: Sequence[Any], key: Any, query: Mapping[str, str]) -> tuple[list[Any], str | None]:
    """One page of ``items`` (sorted by ``key``) for ``pageToken`` / ``pageSize``.

    Without either parameter every item comes back. The token is opaque to clients: the key of
    the last item handed out, so a page stays right while items are added or removed.

    Raises:
        RestError: 400 for a bad page size or a token this server did not issue.
    """
    token, size_raw = query.get("pageToken"), query.get("pageSize")
    if token is None and size_raw is None:
        return list(items), None
    size = DEFAULT_PAGE_SIZE
    if size_raw is not None:
        if not size_raw.isdigit() or not 1 <= int(size_raw[:8]) <= MAX_PAGE_SIZE:
            raise bad_request(f"pageSize must be an integer from 1 to {MAX_PAGE_SIZE}")
        size = int(size_raw)
    ordered = sorted(items, key=key)
    start = 0
    if token:
        try:
            after = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        except (ValueError, binascii.Error, UnicodeError, RecursionError):
            raise bad_request("pageToken is not a token this server issued") from None
        start = next((i for i, item in enumerate(ordered) if _sort_key(key(item)) > _sort_key(after)), len(ordered))
    chunk = ordered[start : start + size]
    if start + size >= len(ordered):
        return chunk, None
    last = json.dumps(_sort_key(key(chunk[-1])))
    return chunk, base64.urlsafe_b64encode(last.encode()).decode("ascii")


def _sort_key(value: Any) -> list[str]:
    # Keys are tuples of strings; a token decodes to a list: compare both as lists of str.
    if isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value):
        return list(value)
    raise bad_request("pageToken is not a token this server issued")
