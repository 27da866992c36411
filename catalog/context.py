"""Per-call commit context: who is committing and what the commit means.

The Flight front end sets these for the duration of a call; the catalog reads them when it
writes the commit-log record. A ``contextvars.ContextVar`` keeps concurrent calls apart
without the catalog importing anything from the server.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class CommitContext:
    principal: str | None = None
    # Overrides the operation derived from the metadata change (e.g. "compact", "truncate").
    operation: str | None = None
    # Free-form details carried into the commit-log record (lineage inputs, SQL text, keys).
    extra: dict[str, Any] = field(default_factory=dict)


# No mutable default (ruff B039): an unset variable means "no context", read as an empty one.
_current: contextvars.ContextVar[CommitContext | None] = contextvars.ContextVar("icefloe_commit_context", default=None)


def current_commit_context() -> CommitContext:
    return _current.get() or CommitContext()


@contextlib.contextmanager
def commit_context(**changes: Any) -> Iterator[CommitContext]:
    """Run a block with some fields of the commit context replaced."""
    base = current_commit_context()
    extra = dict(base.extra)
    extra.update(changes.pop("extra", {}) or {})
    ctx = replace(base, extra=extra, **changes)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
