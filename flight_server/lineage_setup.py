"""How the server names itself in lineage events (the exporter lives in ``catalog.lineage``)."""

from __future__ import annotations

import importlib.metadata

from catalog.lineage import LineageSettings
from flight_server import __version__
from flight_server.config import Config


def lineage_settings(config: Config) -> LineageSettings:
    """``--lineage-namespace`` or ``icefloe://HOST:PORT`` (the bound port), plus engine versions."""
    # The distribution's metadata, not ``openlineage.client.constants``: importing that package
    # loads the whole client and its transports (about a tenth of a server's start), which a
    # server exporting no lineage never uses.
    openlineage_version = importlib.metadata.version("openlineage-python")

    return LineageSettings(
        namespace=config.lineage_namespace or f"icefloe://{config.host}:{config.port}",
        hash_names=config.lineage_hash_names,
        catalog_uri=config.location,
        warehouse=config.warehouse_path,
        engine_version=__version__,
        adapter_version=openlineage_version,
    )
