"""The operator endpoints of the HTTP side: ``/metrics``, ``/healthz``, ``/readyz`` and the watch
page at ``/`` with its JSON and server-sent events (``routes:routes`` is the provider)."""
