"""The Iceberg REST catalog API over the server's ``RocksCatalog`` (``--rest-port``).

- ``routes``: the ASGI router (raw-path matching, so ``%2F`` in a name stays in the name),
  body bounds, auth and the error envelope around every handler;
- ``namespaces`` / ``tables``: one handler per endpoint of the spec;
- ``updates``: requirements and updates from JSON to pyiceberg's models, and what the server
  refuses in them (locations outside the warehouse, schema changes of strict tables);
- ``auth``: the OAuth2 client-credentials token endpoint and bearer checks (Flight's tokens);
- ``errors``: the spec's ``ErrorModel`` and the mapping from catalog exceptions.
"""
