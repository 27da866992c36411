"""Logging set-up through ``dictConfig`` with named loggers (``icefloe.*``)."""

from __future__ import annotations

import logging.config


def configure_logging(level: str = "info") -> None:
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "default": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
            },
            "handlers": {
                "stderr": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"},
            },
            "loggers": {
                "icefloe": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            },
        }
    )
