"""Logging set-up through ``dictConfig`` with named loggers (``icefloe.*``).

``--log-format text`` (the default) writes ``time LEVEL logger: message``; ``json`` writes one
JSON object per line with ``ts``, ``level``, ``logger``, ``message`` and, for structured
lines (the query log), their fields, so a log shipper needs no parsing rules.
"""

from __future__ import annotations

import atexit
import json
import logging
import logging.config
import logging.handlers
import queue
import time
from typing import Any

LOG_FORMATS = ("text", "json")
# Loggers whose lines are formatted and written by a background thread: the query log writes
# one line per statement, and formatting it on the RPC thread cost ~50 us of a ~3 ms SELECT 1.
DEFERRED_LOGGERS = ("icefloe.querylog",)


class _DeferredHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread as they are: formatting happens there (the stock
    QueueHandler formats on the caller's thread). Records of deferred loggers carry no
    mutable arguments, so passing them unformatted is safe."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


_listener: logging.handlers.QueueListener | None = None


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
    _defer(logging.getLogger("icefloe").handlers[0])


def _defer(target: logging.Handler) -> None:
    """Route ``DEFERRED_LOGGERS`` through a queue to a thread writing to ``target``; the queue
    is drained at exit, so no line is lost when the server stops."""
    global _listener
    if _listener is not None:
        _listener.stop()
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _listener = logging.handlers.QueueListener(records, target, respect_handler_level=True)
    _listener.start()
    for name in DEFERRED_LOGGERS:
        deferred = logging.getLogger(name)
        deferred.handlers = [_DeferredHandler(records)]
        deferred.propagate = False
    atexit.register(_stop_listener)


def _stop_listener() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None
