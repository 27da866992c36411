"""``python -m flight_server.cli``: the ``icefloe`` console script without the installed entry point."""

from flight_server.cli.main import main

main()
