"""Settings read from the environment when a component starts, and what a bad value means."""

from __future__ import annotations

import logging
import os


def byte_budget(env: str, default: int, log: logging.Logger) -> int:
    """``env`` as a number of bytes (a negative one: 0), ``default`` when unset. A value that
    is not a whole number is logged on ``log`` and ``default`` used: a typo must not stop the
    server."""
    raw = os.environ.get(env, "").strip()
    try:
        return max(0, int(raw)) if raw else default
    except ValueError:
        log.warning("%s=%r is not a number of bytes; using %d", env, raw, default)
        return default
