"""The Flight server: owns the catalog and routes each RPC to the service that handles it."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import pyarrow.flight as flight

from catalog import RocksCatalog
from flight_server.config import Config

logger = logging.getLogger("icefloe.server")


class IcefloeServer(flight.FlightServerBase):
    """Arrow Flight (SQL) server over a ``RocksCatalog`` warehouse."""

    def __init__(self, config: Config, catalog: RocksCatalog | None = None, **kwargs: Any) -> None:
        self.config = config
        self.catalog = catalog or RocksCatalog("icefloe", warehouse=config.warehouse, **{"read-only": "false"})
        super().__init__(config.location, **kwargs)
        # --port 0 asks the OS for a port; keep the one we got.
        self.config.port = self.port
        # Set when shutdown begins, so long-lived streams (the feed) end and let gRPC drain.
        self.stopping = threading.Event()

    def shutdown_and_close(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.catalog.close()


def serve(config: Config) -> None:
    """Start the server, log the readiness line, and block until SIGTERM/SIGINT."""
    server = IcefloeServer(config)
    logger.info("icefloe listening on %s", config.location)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        logger.info("received signal %d, shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # FlightServerBase starts serving in its constructor; serve() would only install Arrow's
    # own signal handlers over ours, so the main thread just waits for a signal instead.
    stop.wait()
    server.stopping.set()
    server.shutdown_and_close()
    logger.info("icefloe stopped")
