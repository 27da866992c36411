"""Validation and encoding of namespace and table names.

Names become folder names under the warehouse and RocksDB keys, so anything that could
escape the warehouse or collide with our key separators is refused up front.
"""

from __future__ import annotations

import unicodedata

MAX_NAME_BYTES = 255

# Characters that would let a name escape its folder or break our key encoding.
_FORBIDDEN = {"/", "\\", "\x00", "."}


class InvalidNameError(ValueError):
    """A namespace or table name that icefloe refuses to store."""


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
        InvalidNameError: If the namespace is empty, any level is invalid, or the levels
            joined with '.' (its folder name) are longer than 255 bytes.
    """
    if not levels:
        raise InvalidNameError("namespace must have at least one level")
    for level in levels:
        check_name(level, "namespace")
    # The levels joined with '.' name one folder, and file systems cap a name at 255 bytes.
    if len(namespace_folder(levels).encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidNameError(f"namespace is longer than {MAX_NAME_BYTES} bytes with its levels joined by '.'")
    return levels


def namespace_folder(levels: tuple[str, ...]) -> str:
    """Folder name of a namespace inside the warehouse (levels joined with '.')."""
    return ".".join(levels)
