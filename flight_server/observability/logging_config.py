"""Logging set-up through ``dictConfig`` with named loggers (``icefloe.*``).

``--log-format text`` (the default) writes ``time LEVEL logger: message``; ``json`` writes one
JSON object per line with ``ts``, ``level``, ``logger``, ``message`` and, for structured
lines (the query log), their fields, so a log shipper needs no parsing rules.
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from typing import Any

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (UTC times); a record's ``fields`` (``extra={"fields": {...}}``)
    are merged in."""

    converter = staticmethod(time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                body.setdefault(key, value)
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send every ``icefloe.*`` logger to stderr at ``level``, as ``fmt`` ("text" or "json").

    Raises:
        ValueError: ``fmt`` is not one of ``LOG_FORMATS``.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if fmt == "json" else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"default": formatter},
            "handlers": {
                "stderr": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"},
            },
            "loggers": {
                "icefloe": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            },
        }
    )

