"""Parsing and strict validation of a feed subscription (the DoExchange command JSON).

    {"feed": "commits.v1" | "rows.v1",
     "after": <seq >= 0> | "earliest" | "latest",      (optional; default "latest")
     "tables": ["ns.t", "ns.*", ...],                  (optional; default all tables)
     "heartbeat_ms": 1000}                             (optional)

Anything else (unknown keys, wrong types, out-of-range numbers, bad patterns) is refused with
INVALID_ARGUMENT before any stream starts, so a typo never silently subscribes to everything.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any

from catalog.names import InvalidNameError, check_name
from flight_server import errors

COMMITS_FEED = "commits.v1"
ROWS_FEED = "rows.v1"
FEEDS = (COMMITS_FEED, ROWS_FEED)

DEFAULT_HEARTBEAT_MS = 1000
MIN_HEARTBEAT_MS = 50
MAX_HEARTBEAT_MS = 300_000
MAX_COMMAND_BYTES = 64 * 1024
MAX_PATTERNS = 1000

_KEYS = {"feed", "after", "tables", "heartbeat_ms", "until"}
_GLOB_CHARS = set("*?[")


class TablePattern:
    """A ``ns.t`` name or a glob such as ``ns.*`` (each glob matches within one name level)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.levels = tuple(text.split("."))
        self.is_glob = any(ch in _GLOB_CHARS for ch in text)

    def matches(self, levels: tuple[str, ...]) -> bool:
        if len(levels) != len(self.levels):
            return False
        return all(
            fnmatch.fnmatchcase(name, pattern) if any(c in _GLOB_CHARS for c in pattern) else name == pattern
            for name, pattern in zip(levels, self.levels, strict=True)
        )


@dataclass(frozen=True)
class FeedRequest:
    feed: str
    # An int cursor, or "earliest" / "latest" (resolved against the log once the stream starts).
    after: int | str
    patterns: tuple[TablePattern, ...] | None
    heartbeat_ms: int
    # End the stream cleanly once every commit up to this seq was sent (None: follow forever).
    until: int | None = None

    def matches(self, levels: tuple[str, ...]) -> bool:
        """Whether a table (namespace levels + table name) is subscribed to."""
        return self.patterns is None or any(p.matches(levels) for p in self.patterns)


def parse_request(command: bytes) -> FeedRequest:
    """Decode and validate the subscription carried in a ``FlightDescriptor.for_command``.

    Raises:
        errors.InvalidArgument: On anything malformed, with a message saying what and why.
    """
    if len(command) > MAX_COMMAND_BYTES:
        raise errors.InvalidArgument(f"feed subscription is larger than {MAX_COMMAND_BYTES} bytes")
    try:
        body = json.loads(command.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise errors.InvalidArgument(
            'feed subscription must be a JSON object such as {"feed": "commits.v1", "after": "latest"}'
        ) from None
    if not isinstance(body, dict):
        raise errors.InvalidArgument("feed subscription must be a JSON object")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise errors.InvalidArgument(
            f"unknown feed subscription key(s): {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(_KEYS))}"
        )
    feed = body.get("feed")
    if feed not in FEEDS:
        raise errors.InvalidArgument(f"'feed' must be one of {', '.join(map(repr, FEEDS))}, got {_show(feed)}")
    after = _parse_after(body.get("after", "latest"))
    patterns = _parse_tables(body["tables"]) if "tables" in body else None
    heartbeat_ms = _parse_heartbeat(body.get("heartbeat_ms", DEFAULT_HEARTBEAT_MS))
    until = _parse_until(body["until"], after) if "until" in body else None
    if feed == ROWS_FEED and (patterns is None or len(patterns) != 1 or patterns[0].is_glob):
        raise errors.InvalidArgument("rows.v1 needs exactly one table in 'tables' (a name such as \"ns.t\", no glob)")
    return FeedRequest(feed=feed, after=after, patterns=patterns, heartbeat_ms=heartbeat_ms, until=until)


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_after(value: Any) -> int | str:
    if value in ("earliest", "latest"):
        return str(value)
    # bool is an int subclass in Python; true/false are not sequence numbers.
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise errors.InvalidArgument(f"'after' must be >= 0, got {value}")
        if value >= 2**63:
            raise errors.InvalidArgument(f"'after' is too large: {value}")
        return value
    raise errors.InvalidArgument(
        f"'after' must be a commit sequence number (>= 0), \"earliest\" or \"latest\", got {_show(value)}"
    )


def _parse_until(value: Any, after: int | str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise errors.InvalidArgument(f"'until' must be a commit sequence number (>= 0), got {_show(value)}")
    if isinstance(after, int) and value < after:
        raise errors.InvalidArgument(f"'until' ({value}) is before 'after' ({after})")
    return value


def _parse_tables(value: Any) -> tuple[TablePattern, ...]:
    if not isinstance(value, list) or not value:
        raise errors.InvalidArgument(
            "'tables' must be a non-empty list of \"ns.table\" names or globs (omit it for all tables)"
        )
    if len(value) > MAX_PATTERNS:
        raise errors.InvalidArgument(f"'tables' may hold at most {MAX_PATTERNS} entries")
    patterns = []
    for item in value:
        if not isinstance(item, str):
            raise errors.InvalidArgument(f"each entry of 'tables' must be a string, got {_show(item)}")
        levels = item.split(".")
        if len(levels) < 2:
            raise errors.InvalidArgument(
                f"table {_show(item)} must be qualified with its namespace, e.g. \"ns.t\" or \"ns.*\""
            )
        for level in levels:
            if any(ch in _GLOB_CHARS for ch in level):
                if level.count("[") != level.count("]"):
                    raise errors.InvalidArgument(f"unbalanced '[' in table pattern {_show(item)}")
                continue
            try:
                check_name(level, "table pattern")
            except InvalidNameError as exc:
                raise errors.InvalidArgument(f"bad table pattern {_show(item)}: {exc}") from None
        patterns.append(TablePattern(item))
    return tuple(patterns)


def _parse_heartbeat(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.InvalidArgument(f"'heartbeat_ms' must be an integer, got {_show(value)}")
    if not MIN_HEARTBEAT_MS <= value <= MAX_HEARTBEAT_MS:
        raise errors.InvalidArgument(
            f"'heartbeat_ms' must be between {MIN_HEARTBEAT_MS} and {MAX_HEARTBEAT_MS}, got {value}"
        )
    return value
