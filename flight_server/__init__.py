"""icefloe's Flight / Flight SQL front end: server, SQL engine, feed, CLI."""

__version__ = "0.1.0"
