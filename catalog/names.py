"""Validation and encoding of namespace and table names.

Names become folder names under the warehouse and RocksDB keys, so anything that could
escape the warehouse or collide with our key separators is refused up front.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, field_validator
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.types import transform_dict_value_to_str

MAX_NAME_BYTES = 255

# Characters that would let a name escape its folder or break our key encoding.
_FORBIDDEN = {"/", "\\", "\x00", "."}


class InvalidNameError(ValueError):
    """A namespace or table name that icefloe refuses to store."""


class EmptyNamespaceError(NoSuchNamespaceError, InvalidNameError):
    """A namespace identifier that is empty, or has an empty or whitespace-only level.

    pyiceberg's reference catalogs answer such an identifier (``create_namespace("")``,
    ``create_table("tbl")``) with ``NoSuchNamespaceError``; it is also an ``InvalidNameError``
    (a ``ValueError``) so that callers validating names refuse it like any other bad name.
    """


def check_name(name: str, what: str) -> str:
    """Return ``name`` if it is a safe namespace level or table name.

    Args:
        name: One namespace level or a table name.
        what: "namespace" or "table", used in the error message.

    Returns:
        The name, unchanged.

    Raises:
        InvalidNameError: If the name is empty, too long, contains a path separator, a dot,
            a control character, or is not valid text.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} name must be a string, got {type(name).__name__}")
    if name == "":
        raise InvalidNameError(f"{what} name must not be empty")
    if name.strip() != name:
        raise InvalidNameError(f"{what} name {name!r} must not start or end with whitespace")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidNameError(f"{what} name is not valid UTF-8 text") from exc
    if len(encoded) > MAX_NAME_BYTES:
        raise InvalidNameError(f"{what} name is longer than {MAX_NAME_BYTES} bytes")
    for ch in name:
        if ch in _FORBIDDEN:
            shown = "NUL" if ch == "\x00" else repr(ch)
            raise InvalidNameError(f"{what} name {name!r} must not contain {shown}")
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise InvalidNameError(f"{what} name {name!r} must not contain control or unassigned characters")
    return name


def check_namespace(levels: tuple[str, ...]) -> tuple[str, ...]:
    """Validate every level of a namespace tuple.

    Raises:
        EmptyNamespaceError: If the namespace has no level, or an empty or whitespace-only
            level (a ``NoSuchNamespaceError`` and an ``InvalidNameError``).
        InvalidNameError: If any level is refused for its characters or length, or the
            levels joined with '.' (its folder name) are longer than 255 bytes.
    """
    if not levels:
        raise EmptyNamespaceError("empty namespace identifier: a namespace needs at least one level")
    if any(isinstance(level, str) and level.strip() == "" for level in levels):
        raise EmptyNamespaceError(f"namespace identifier {levels!r} has an empty or whitespace-only level")
    for level in levels:
        check_name(level, "namespace")
    # The levels joined with '.' name one folder, and file systems cap a name at 255 bytes.
    if len(namespace_folder(levels).encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidNameError(f"namespace is longer than {MAX_NAME_BYTES} bytes with its levels joined by '.'")
    return levels


def namespace_folder(levels: tuple[str, ...]) -> str:
    """Folder name of a namespace inside the warehouse (levels joined with '.')."""
    return ".".join(levels)


def check_properties(properties: Mapping[Any, Any], what: str) -> dict[str, str]:
    """Namespace or table properties as strings, the way pyiceberg stores table properties.

    Keys must be strings; values may be strings, or numbers and booleans, which are turned
    into their text (booleans as ``true`` / ``false``, as pyiceberg does).

    Args:
        properties: The properties a caller passed.
        what: "namespace" or "table", used in the error message.

    Raises:
        ValueError: If a key is not a string, or a value is None or of another type.
    """
    checked: dict[str, str] = {}
    for key, value in properties.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} property keys must be strings, got {type(key).__name__} {key!r}")
        if value is None:
            if what == "table":
                # pyiceberg's catalogs refuse it while building the table metadata: its own
                # pydantic ValidationError (a ValueError), which pyiceberg's suite expects.
                _PyicebergProperties(properties=dict(properties))
            raise ValueError(f"{what} property {key!r} has no value (None); property values must be strings")
        if isinstance(value, bool):
            checked[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            checked[key] = str(value)
        else:
            raise ValueError(
                f"{what} property {key!r} must be a string, got {type(value).__name__}; property values are strings"
            )
    return checked


class _PyicebergProperties(BaseModel):
    """Table properties checked by pyiceberg's own validator (as ``TableMetadata`` does)."""

    properties: dict[Any, Any]

    _to_str = field_validator("properties", mode="before")(transform_dict_value_to_str)
