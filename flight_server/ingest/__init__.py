"""Running ingest connectors inside ``icefloe serve``: definitions, actions, threads, CLI."""
