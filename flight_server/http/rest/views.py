"""View endpoints of the REST catalog: list, create, register, load, exists, replace (commit), drop and
rename. The catalog side is ``catalog.views``: every change is a catalog commit on the commit
log and the feed (``view-create`` / ``view-register`` / ``view-replace`` / ``view-rename`` /
``view-drop``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.view.metadata import ViewVersion
from starlette.responses import JSONResponse, Response

from catalog import views
from catalog.sandbox import InvalidLocationError, OutsideTableError
from flight_server.http.rest.errors import bad_request
from flight_server.http.rest.tables import _model
from flight_server.http.rest.updates import MAX_CHANGES, Locations
from flight_server.http.rest.wire import Call, checked_name, identifier_from_json, page, properties_from_json

if TYPE_CHECKING:
    from catalog import RocksCatalog


def _view_body(loaded: views.LoadedView) -> Response:
    # pyiceberg's own serialisation (aliases, no nulls), as in the metadata files themselves.
    metadata = loaded.metadata.model_dump_json(by_alias=True, exclude_none=True)
    text = f'{{"metadata-location":{json.dumps(loaded.metadata_location)},"metadata":{metadata},"config":{{}}}}'
    return Response(text, media_type="application/json")


def _view_schema(schema: Schema) -> Schema:
    """The schema as the client sent it, as Iceberg keeps it (a later REPLACE sending the same
    schema then finds it again); fresh ids only when the sent ones are not usable ids."""
    ids = [field.field_id for field in schema.fields]
    if all(i > 0 for i in ids) and len(set(ids)) == len(ids):
        return schema
    return assign_fresh_schema_ids(schema)


def _array(raw: object, what: str) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_CHANGES:
        raise bad_request(f"{what} must be a JSON array of at most {MAX_CHANGES} entries")
    return raw


class ViewHandlers:
    """Handlers of ``/v1/namespaces/{namespace}/views...`` and ``/v1/views/rename``.

    Args:
        catalog: The catalog the views live in.
        locations: Which locations clients may name (inside the warehouse).
    """

    def __init__(self, catalog: RocksCatalog, locations: Locations) -> None:
        self._catalog = catalog
        self._locations = locations

    def list(self, call: Call) -> Response:
        """``GET /v1/namespaces/{namespace}/views[?pageToken=..&pageSize=N]``."""
        found = [tuple(identifier) for identifier in self._catalog.list_views(call.namespace)]
        chunk, token = page(found, lambda identifier: identifier, call.query)
        return JSONResponse({
            "identifiers": [{"namespace": list(i[:-1]), "name": i[-1]} for i in chunk],
            "next-page-token": token,
        })

    def create(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/views``: a ``CreateViewRequest``."""
        ns = call.namespace
        body = call.json()
        name = checked_name(body.get("name"), "view")
        schema = _view_schema(_model(Schema, body.get("schema"), "schema"))
        version = _model(ViewVersion, body.get("view-version"), "view-version")
        properties = properties_from_json(body.get("properties"), "properties")
        location = body.get("location")
        if location is not None:
            if not isinstance(location, str):
                raise bad_request("location must be a string")
            self._locations.check(location, "location")
        self._catalog._check_writable()
        return _view_body(views.create(self._catalog, ns, name, schema, version, location, properties))

    def register(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/register-view`` with ``name`` and
        ``metadata-location``: a ``LoadViewResult``."""
        ns = call.namespace
        body = call.json()
        name = checked_name(body.get("name"), "view")
        location = body.get("metadata-location")
        if not isinstance(location, str) or not location:
            raise bad_request("metadata-location must be a string")
        self._locations.check(location, "metadata-location")
        try:
            return _view_body(views.register(self._catalog, ns, name, location))
        except (InvalidLocationError, OutsideTableError):
            raise  # the sandbox's own answer, with its message
        except (FileNotFoundError, IsADirectoryError, PermissionError, OSError):
            raise bad_request("metadata-location cannot be read (missing, a folder, or not readable)") from None
        except (ValueError, ValidationError):
            raise bad_request("metadata-location is not an Iceberg view metadata JSON file") from None

    def load(self, call: Call) -> Response:
        """``GET /v1/namespaces/{namespace}/views/{view}``: a ``LoadViewResult``."""
        ns, name = call.view
        self._catalog._refresh()
        return _view_body(views.load(self._catalog, ns, name))

    def exists(self, call: Call) -> Response:
        """``HEAD /v1/namespaces/{namespace}/views/{view}``: 204 or 404."""
        ns, name = call.view
        return Response(status_code=204 if self._catalog.view_exists((*ns, name)) else 404)

    def replace(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/views/{view}``: a ``CommitViewRequest``."""
        ns, name = call.view
        body = call.json()
        if body.get("identifier") is not None and identifier_from_json(body["identifier"], "identifier") != (ns, name):
            raise bad_request("identifier in the body names another view than the path")
        updates = _array(body.get("updates"), "updates")
        for update in updates:
            if isinstance(update, dict) and update.get("action") == "set-location":
                location = update.get("location")
                if not isinstance(location, str):
                    raise bad_request("set-location needs a location string")
                self._locations.check(location, "set-location")
        loaded = views.replace(self._catalog, ns, name, _array(body.get("requirements"), "requirements"), updates)
        return _view_body(loaded)

    def drop(self, call: Call) -> Response:
        """``DELETE /v1/namespaces/{namespace}/views/{view}``."""
        ns, name = call.view
        self._catalog.drop_view((*ns, name))
        return Response(status_code=204)

    def rename(self, call: Call) -> Response:
        """``POST /v1/views/rename`` with ``source`` and ``destination`` identifiers."""
        body = call.json()
        src = identifier_from_json(body.get("source"), "source")
        dst = identifier_from_json(body.get("destination"), "destination")
        self._catalog.rename_view((*src[0], src[1]), (*dst[0], dst[1]))
        return Response(status_code=204)
