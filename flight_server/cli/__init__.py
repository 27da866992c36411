"""The ``icefloe`` commands (``main.py``), their shared connection and login code, and the feed
client they (and ``icefloe`` / ``pyspark_icefloe``) use. Nothing here is imported by the server.

The package itself imports nothing, so importing ``flight_server.cli.client`` from a user's
process does not pull in click or the server's allocator settings (``main.py`` sets them)."""
