"""Namespace endpoints of the REST catalog: list (with parent and paging), create, load,
exists, drop, update properties. Bodies and answers use the spec's field names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response

from flight_server.http.rest.errors import RestError, bad_request
from flight_server.http.rest.wire import (
    Call,
    namespace_from_json,
    namespace_from_path,
    page,
    properties_from_json,
)
from flight_server.security import roles

if TYPE_CHECKING:
    from catalog import RocksCatalog


class NamespaceHandlers:
    """Handlers of ``/v1/namespaces...``.

    Args:
        catalog: The catalog the namespaces live in.
    """

    def __init__(self, catalog: RocksCatalog) -> None:
        self._catalog = catalog

    def list(self, call: Call) -> Response:
        """``GET /v1/namespaces[?parent=a%1Fb][&pageToken=..][&pageSize=N]``."""
        parent_raw = call.query.get("parent")
        parent = namespace_from_path(parent_raw) if parent_raw else ()
        found = [tuple(ns) for ns in self._catalog.list_namespaces(parent)]
        chunk, token = page(found, lambda ns: ns, call.query)
        return JSONResponse({"namespaces": [list(ns) for ns in chunk], "next-page-token": token})

    def create(self, call: Call) -> Response:
        """``POST /v1/namespaces`` with ``{"namespace": [...], "properties": {...}}``."""
        body = call.json()
        ns = namespace_from_json(body.get("namespace"))
        properties = properties_from_json(body.get("properties"), "properties")
        self._catalog.create_namespace(ns, properties)
        return JSONResponse({"namespace": list(ns), "properties": self._catalog.load_namespace_properties(ns)})

    def load(self, call: Call) -> Response:
        """``GET /v1/namespaces/{namespace}``."""
        ns = call.namespace
        return JSONResponse({"namespace": list(ns), "properties": self._catalog.load_namespace_properties(ns)})

    def exists(self, call: Call) -> Response:
        """``HEAD /v1/namespaces/{namespace}``: 204 or 404."""
        return Response(status_code=204 if self._catalog.namespace_exists(call.namespace) else 404)

    def drop(self, call: Call) -> Response:
        """``DELETE /v1/namespaces/{namespace}``: 204; 409 when it holds tables or namespaces;
        400 for ``default``, which every Flight SQL session resolves unqualified names in."""
        ns = call.namespace
        if roles.is_protected_namespace(ns):
            raise bad_request(f"namespace {'.'.join(ns)} is every SQL session's current schema and cannot be dropped "
                              "(drop its tables instead)")
        self._catalog.drop_namespace(ns)
        return Response(status_code=204)

    def update_properties(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/properties`` with ``removals`` and ``updates``."""
        ns = call.namespace
        body = call.json()
        removals = body.get("removals") or []
        if not isinstance(removals, list) or not all(isinstance(key, str) for key in removals):
            raise bad_request("removals must be a JSON array of property names")
        updates = properties_from_json(body.get("updates"), "updates")
        both = sorted(set(removals) & set(updates))
        if both:
            raise RestError(422, "UnprocessableEntityException",
                            f"properties both removed and updated: {', '.join(both)[:200]}")
        summary = self._catalog.update_namespace_properties(ns, set(removals), updates)
        return JSONResponse({"updated": summary.updated, "removed": summary.removed, "missing": summary.missing})

