"""The view methods of ``RocksCatalog``: identifiers resolved here, the rest in ``catalog.views``.

Tables and views share one name space, so a view's name is checked against tables there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View
from pyiceberg.view.metadata import ViewVersion

from catalog import views
from catalog.catalog_storage import CatalogStorage
from catalog.names import InvalidNameError

if TYPE_CHECKING:
    import pyarrow as pa


class ViewMethods(CatalogStorage):
    """Iceberg views (a part of ``RocksCatalog``)."""

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        ns = self._namespace(namespace)
        self._refresh()
        self._require_namespace(ns)
        return views.list_views(self, ns)

    def view_exists(self, identifier: str | Identifier) -> bool:
        try:
            ns, name = self._split(identifier)
        except NoSuchTableError:
            return False
        self._refresh()
        return views.exists(self, ns, name)

    def load_view(self, identifier: str | Identifier) -> View:
        ns, name = self._split(identifier)
        self._refresh()
        loaded = views.load(self, ns, name)
        return View((*ns, name), loaded.metadata)

    def drop_view(self, identifier: str | Identifier) -> None:
        ns, name = self._split(identifier)
        views.drop(self, ns, name)

    def rename_view(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> None:
        src = self._split(from_identifier)
        dst = self._split(to_identifier, err=InvalidNameError)
        views.rename(self, src, dst)

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        raise NotImplementedError("registering views is not supported by icefloe")

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        ns, name = self._split(identifier, err=InvalidNameError)
        iceberg_schema = assign_fresh_schema_ids(self._convert_schema_if_needed(schema))
        loaded = views.create(self, ns, name, iceberg_schema, view_version, location, dict(properties))
        return View((*ns, name), loaded.metadata)
