"""How the server names itself in lineage events (the exporter lives in ``catalog.lineage``)."""

from __future__ import annotations

from catalog.lineage import LineageSettings
from flight_server import __version__
from flight_server.config import Config


def lineage_settings(config: Config) -> LineageSettings:
    """``--lineage-namespace`` or ``icefloe://HOST:PORT`` (the bound port), plus engine versions."""
    from openlineage.client.constants import __version__ as openlineage_version

    return LineageSettings(
        namespace=config.lineage_namespace or f"icefloe://{config.host}:{config.port}",
        hash_names=config.lineage_hash_names,
        catalog_uri=config.location,
        warehouse=config.warehouse_path,
        engine_version=__version__,
        adapter_version=openlineage_version,
    )
