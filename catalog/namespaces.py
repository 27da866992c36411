"""Namespaces of ``RocksCatalog``: create (with missing parents), drop, list, properties.

A namespace is one RocksDB key holding its properties as JSON; a child's key extends its
parent's, so listing children is a prefix scan.
"""

from __future__ import annotations

import json

from pyiceberg.catalog import Catalog, PropertiesUpdateSummary
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NamespaceNotEmptyError
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from catalog import keys, views
from catalog.catalog_internals import CatalogInternals
from catalog.names import InvalidNameError, check_properties
from catalog.sandbox import InvalidLocationError


def create(catalog: CatalogInternals, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
    """Create a namespace (and any missing parent levels, without properties).

    Raises:
        NamespaceAlreadyExistsError: If it exists.
        NoSuchNamespaceError: If the identifier is empty or has an empty or whitespace-only
            level (``EmptyNamespaceError``, also an ``InvalidNameError``).
        InvalidNameError: If a level name is refused for its characters or length.
        ValueError: If a property key or value is not a string (None included).
    """
    catalog._check_writable()
    ns = catalog._namespace(namespace, err=InvalidNameError)
    checked = check_properties(properties, "namespace")
    check_location(catalog, checked)
    with catalog._commit_lock:
        if catalog._ns_exists(ns):
            raise NamespaceAlreadyExistsError(f"Namespace already exists: {'.'.join(ns)}")
        # Missing parent levels are created (without properties) in the same batch, so a
        # child namespace always has a parent that exists, lists and can be dropped last.
        puts = {
            keys.namespace_key(ns[:depth]): b"{}" for depth in range(1, len(ns)) if not catalog._ns_exists(ns[:depth])
        }
        puts[keys.namespace_key(ns)] = json.dumps(checked).encode("utf-8")
        catalog.store.write(puts)


def drop(catalog: CatalogInternals, namespace: str | Identifier) -> None:
    """Drop an empty namespace.

    Raises:
        NoSuchNamespaceError: If it does not exist.
        NamespaceNotEmptyError: If it holds tables or child namespaces.
    """
    catalog._check_writable()
    ns = catalog._namespace(namespace)
    with catalog._commit_lock:
        catalog._require_namespace(ns)
        tables = catalog.list_tables(ns)
        if tables:
            raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: {len(tables)} tables exist")
        if views.list_views(catalog, ns):
            raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: views exist")
        children = catalog.list_namespaces(ns)
        if children:
            raise NamespaceNotEmptyError(f"Namespace {'.'.join(ns)} is not empty: it has child namespaces")
        catalog.store.write({}, (keys.namespace_key(ns),))


def list_children(catalog: CatalogInternals, namespace: str | Identifier = ()) -> list[Identifier]:
    """List the direct children of a namespace (top-level namespaces for ``()``).

    Raises:
        NoSuchNamespaceError: If the parent does not exist.
    """
    parent = Catalog.identifier_to_tuple(namespace)
    catalog._refresh()
    if parent:
        ns = catalog._namespace(parent)
        catalog._require_namespace(ns)
        prefix = keys.namespace_key(ns) + keys.SEP.encode()
    else:
        prefix = keys.NAMESPACE
    children: set[tuple[str, ...]] = set()
    for key, _ in catalog.store.scan(prefix):
        levels = keys.decode_namespace(key[len(keys.NAMESPACE) :])
        children.add(levels[: len(parent) + 1])
    return sorted(children)


def update_properties(
    catalog: CatalogInternals, namespace: str | Identifier, removals: set[str] | None = None,
    updates: Properties = EMPTY_DICT,
) -> PropertiesUpdateSummary:
    """Remove and set namespace properties.

    Raises:
        NoSuchNamespaceError: If it does not exist.
        ValueError: If a key is both removed and updated, or a key or value is not a
            string (None included).
    """
    catalog._check_writable()
    ns = catalog._namespace(namespace)
    checked = check_properties(updates, "namespace")
    check_location(catalog, checked)
    if removals and any(not isinstance(key, str) for key in removals):
        raise ValueError("namespace property keys to remove must be strings")
    with catalog._commit_lock:
        current = catalog.load_namespace_properties(ns)
        summary, updated = catalog._get_updated_props_and_update_summary(current, removals, checked)
        catalog.store.write({keys.namespace_key(ns): json.dumps(updated).encode("utf-8")})
    return summary


def check_location(catalog: CatalogInternals, properties: Properties) -> None:
    """A namespace ``location`` (where its tables' folders go) lies inside the warehouse."""
    location = properties.get("location")
    if location is not None and not catalog.files.inside(location):
        raise InvalidLocationError(
            f"namespace location {str(location)[:200]!r} must lie inside the catalog's warehouse"
        )
