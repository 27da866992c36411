"""Where ``RocksCatalog`` tables live: the default folder of a new table, and the check that a
table's folder lies inside the warehouse and neither inside nor around another table's or
view's folder (each table's FileIO is confined to its folder, so folders must not nest).
"""

from __future__ import annotations

import uuid

from catalog import keys, views
from catalog.catalog_internals import CatalogInternals
from catalog.names import namespace_folder
from catalog.sandbox import TableLocationTakenError, Warehouse


def resolve(catalog: CatalogInternals, location: str | None, database_name: str, table_name: str) -> str:
    """``location`` if given, else the table's folder under its namespace's ``location`` property,
    else under the warehouse (``database_name`` is the namespace joined with ``\\x1f``); a plain
    local path comes back as its ``file://`` URI, the one spelling new tables get."""
    if location:
        return catalog.files.as_uri(location.rstrip("/"))
    ns = tuple(database_name.split("\x1f"))
    props = catalog.load_namespace_properties(ns)
    if ns_location := props.get("location"):
        return catalog.files.as_uri(f"{ns_location.rstrip('/')}/{table_name}")
    return f"{catalog.warehouse.rstrip('/')}/{namespace_folder(ns)}/{table_name}"


def new_table_folder(
    catalog: CatalogInternals, location: str | None, ns: tuple[str, ...], table: str
) -> tuple[str, str]:
    """The location and checked root folder of a new table: ``location`` if given, else its
    default folder, or a fresh one next to it when the default is still another table's
    (renamed tables keep their folder).

    Raises:
        TableLocationTakenError: A given location overlaps another table's or view's folder.
    """
    table_location = resolve(catalog, location, "\x1f".join(ns), table)
    try:
        return table_location, check_root(catalog, table_location, (*ns, table))
    except TableLocationTakenError:
        if location:
            raise
        table_location = f"{table_location}-{uuid.uuid4().hex[:8]}"
        return table_location, check_root(catalog, table_location, (*ns, table))


def check_root(catalog: CatalogInternals, location: str, identifier: tuple[str, ...] | None = None) -> str:
    """Validate a table location: inside the warehouse, and neither inside nor around
    another table's folder (``identifier`` names the table itself, which may keep its own).

    Raises:
        InvalidLocationError: It is not allowed.
    """
    root = catalog.files.table_root(location)
    for other in table_keys(catalog):
        if identifier is not None and other == identifier:
            continue
        pointer = catalog._pointer(other[:-1], other[-1])
        if pointer is None:
            continue
        try:
            other_location = catalog._read_metadata(other[:-1], other[-1], pointer["metadata_location"]).location
        except Exception:  # noqa: BLE001 - a table we cannot read has no folder to protect
            continue
        other_root = catalog.files.canonical(other_location)
        if other_root is None:
            continue
        if Warehouse._under(root, other_root) or Warehouse._under(other_root, root):
            raise TableLocationTakenError(
                f"table location {location[:200]!r} overlaps the folder of table {'.'.join(other)}"
            )
    for other, folder in views.view_folders(catalog):
        other_root = catalog.files.canonical(folder) if other != identifier else None
        if other_root is not None and (Warehouse._under(root, other_root) or Warehouse._under(other_root, root)):
            raise TableLocationTakenError(
                f"location {location[:200]!r} overlaps the folder of view {'.'.join(other)}")
    return root


def table_keys(catalog: CatalogInternals) -> list[tuple[str, ...]]:
    found = []
    for key, _ in catalog.store.scan(keys.TABLE):
        ns, name = keys.decode_table_key(key)
        found.append((*ns, name))
    return found
