"""``HttpDeps``: what the HTTP side uses of the server, built once by the server for all its ports.

Route providers (``http.apps``) take this, never the server: the REST catalog needs the catalog,
the auth and the token lifetime; the operator endpoints the operations view, metrics, the
commit hub and the stopping flag. Per-server state of the HTTP side (the connection guard, the
summary sampler) is keyed by this object, so the ports of one server share it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from catalog import RocksCatalog
from flight_server.config import Config
from flight_server.observability.metrics import Metrics
from flight_server.observability.operations import Operations
from flight_server.security.auth import AuthMiddlewareFactory


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, a key of per-server state
class HttpDeps:
    config: Config
    catalog: RocksCatalog
    metrics: Metrics
    ops: Operations
    auth: AuthMiddlewareFactory | None  # None: authentication is off
    stopping: threading.Event
