"""icefloe's ingestion plane: connectors pull data from sources into tables, exactly once.

``icefloe.ingest.contract`` is the contract a connector implements; see docs/ingestion.md.
"""

from icefloe.ingest.contract import (
    BackfillRange,
    Checkpoint,
    Connector,
    ConnectorError,
    Envelope,
    Health,
    InvalidOptions,
    Op,
    SourceDataError,
    SourceUnavailable,
    State,
)

__all__ = [
    "BackfillRange", "Checkpoint", "Connector", "ConnectorError", "Envelope", "Health", "InvalidOptions", "Op",
    "SourceDataError", "SourceUnavailable", "State",
]
