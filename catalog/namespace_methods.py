"""The namespace methods of ``RocksCatalog``, and the listing of a namespace's tables.

Creating, dropping and updating a namespace is ``catalog.namespaces``; reads are one RocksDB
get or prefix scan each, after the read-only catalog catches up with the writer.
"""

from __future__ import annotations

import json

from pyiceberg.catalog import PropertiesUpdateSummary
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from catalog import keys, namespaces
from catalog.catalog_storage import CatalogStorage


class NamespaceMethods(CatalogStorage):
    """Namespaces, and the tables each holds (a part of ``RocksCatalog``)."""

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        """Create a namespace and any missing parents (see ``catalog.namespaces.create``)."""
        namespaces.create(self, namespace, properties)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        """Drop an empty namespace (see ``catalog.namespaces.drop``)."""
        namespaces.drop(self, namespace)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        """List the tables directly in a namespace.

        Raises:
            NoSuchNamespaceError: If it does not exist.
        """
        ns = self._namespace(namespace)
        self._refresh()
        self._require_namespace(ns)
        prefix = keys.table_prefix(ns)
        return [(*ns, key[len(prefix) :].decode("utf-8")) for key, _ in self._store.scan(prefix)]

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        """The direct children of a namespace, top-level namespaces for ``()``."""
        return namespaces.list_children(self, namespace)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        """Properties of a namespace.

        Raises:
            NoSuchNamespaceError: If it does not exist.
        """
        ns = self._namespace(namespace)
        self._refresh()
        raw = self._store.get(keys.namespace_key(ns))
        if raw is None:
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(ns)}")
        props: Properties = json.loads(raw)
        return props

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        try:
            ns = self._namespace(namespace)
        except NoSuchNamespaceError:
            return False
        self._refresh()
        return self._ns_exists(ns)

    def update_namespace_properties(
        self, namespace: str | Identifier, removals: set[str] | None = None, updates: Properties = EMPTY_DICT
    ) -> PropertiesUpdateSummary:
        """Remove and set namespace properties (see ``catalog.namespaces.update_properties``)."""
        return namespaces.update_properties(self, namespace, removals, updates)
