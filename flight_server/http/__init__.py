"""The HTTP side of the server (off unless asked for): the Iceberg REST catalog on
``--rest-port`` and the operator endpoints (metrics, health, watch page) on
``--metrics-port`` (and on the REST port too when it is on).

``host.HttpHost`` runs one ASGI app per port with uvicorn in a thread of the server process,
next to Flight, so both sides share the one catalog object. The apps are assembled by
``apps.build_apps`` from route providers; each provider is a function taking the collaborators
it uses and returning Starlette routes.
"""
