"""pyiceberg's ``Catalog`` contract for namespaces, run against RocksCatalog (over a path and
over a file:// URI) and SqlCatalog, the reference.

The cases follow the generic ones pyiceberg's own suite (tests/catalog/test_catalog_behaviors.py)
runs against its reference catalogs: a behaviour that passes on SqlCatalog and fails on
RocksCatalog is our bug. Deliberate differences live in test_rocks_only.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from catalog_testlib import SCHEMA, ids, rows
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NamespaceNotEmptyError, NoSuchNamespaceError

# Empty identifiers and identifiers with an empty or whitespace-only level.
EMPTY_NAMESPACES: list[Any] = ["", (), ("",), ("", ""), " ", (" ",), ("ns", ""), ("ns", "  "), "ns.", ".ns"]


def _user_properties(cat: Catalog, namespace: str | tuple[str, ...]) -> dict[str, str]:
    """Namespace properties without SqlCatalog's bookkeeping entry ``exists``."""
    props = dict(cat.load_namespace_properties(namespace))
    if props.get("exists") == "true":
        del props["exists"]
    return props


def test_namespace_lifecycle(any_catalog: Catalog) -> None:
    cat = any_catalog
    assert cat.list_namespaces() == []
    assert not cat.namespace_exists("sales")
    cat.create_namespace("sales", {"owner": "ana", "comment": "orders"})
    assert cat.namespace_exists("sales")
    assert cat.namespace_exists(("sales",))
    assert cat.list_namespaces() == [("sales",)]
    props = cat.load_namespace_properties("sales")
    assert props["owner"] == "ana" and props["comment"] == "orders"
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace("sales")
    cat.create_namespace_if_not_exists("sales")  # no error
    cat.drop_namespace("sales")
    assert not cat.namespace_exists("sales")
    assert cat.list_namespaces() == []
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace("sales")


@pytest.mark.parametrize("namespace", EMPTY_NAMESPACES, ids=repr)
def test_empty_namespace_identifier_is_no_such_namespace(any_catalog: Catalog, namespace: Any) -> None:
    with pytest.raises(NoSuchNamespaceError):
        any_catalog.create_namespace(namespace)
    assert any_catalog.list_namespaces() == []


@pytest.mark.parametrize("identifier", ["tbl", ("tbl",), ".tbl", ("", "tbl"), (" ", "tbl")], ids=repr)
def test_create_table_without_namespace_is_no_such_namespace(any_catalog: Catalog, identifier: Any) -> None:
    with pytest.raises(NoSuchNamespaceError):
        any_catalog.create_table(identifier, SCHEMA)
    assert any_catalog.list_namespaces() == []


def test_namespace_properties_round_trip(any_catalog: Catalog, given_warehouse: str) -> None:
    cat = any_catalog
    props = {"comment": "a description", "location": f"{given_warehouse}/somewhere/else", "p1": "1", "p2": "2"}
    cat.create_namespace("ns", props)
    assert _user_properties(cat, "ns") == props
    cat.create_namespace("bare")
    assert _user_properties(cat, "bare") == {}


def test_namespace_property_numbers_are_stored_as_text(any_catalog: Catalog) -> None:
    any_catalog.create_namespace("ns", {"n": 1})  # type: ignore[dict-item]
    assert _user_properties(any_catalog, "ns") == {"n": "1"}


@pytest.mark.parametrize("properties", [{None: "value"}, {"key": None}], ids=["None key", "None value"])
def test_namespace_properties_without_text_are_refused(any_catalog: Catalog, properties: dict[Any, Any]) -> None:
    """The reference refuses them (its database has NOT NULL columns); nothing is stored as "null"."""
    cat = any_catalog
    with pytest.raises(Exception):  # noqa: B017 - SqlCatalog: IntegrityError; RocksCatalog: ValueError
        cat.create_namespace("ns", properties)
    assert not cat.namespace_exists("ns")
    cat.create_namespace("kept", {"a": "1"})
    with pytest.raises(Exception):  # noqa: B017
        cat.update_namespace_properties("kept", updates={"a": None})  # type: ignore[dict-item]
    assert _user_properties(cat, "kept") == {"a": "1"}


def test_update_namespace_properties(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns", {"a": "1", "b": "2"})
    summary = cat.update_namespace_properties("ns", removals={"a", "missing"}, updates={"c": "3", "b": "20"})
    assert sorted(summary.removed) == ["a"]
    assert sorted(summary.updated) == ["b", "c"]
    assert summary.missing == ["missing"]
    props = cat.load_namespace_properties("ns")
    assert props["b"] == "20" and props["c"] == "3" and "a" not in props
    with pytest.raises(ValueError):
        cat.update_namespace_properties("ns", removals={"b"}, updates={"b": "x"})
    assert cat.load_namespace_properties("ns")["b"] == "20"


def test_update_namespace_properties_updates_only_and_removals_only(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns", {"key1": "value1", "key2": "value2"})
    summary = cat.update_namespace_properties("ns", updates={"key3": "value3", "key4": "value4"})
    assert (summary.removed, sorted(summary.updated), summary.missing) == ([], ["key3", "key4"], [])
    summary = cat.update_namespace_properties("ns", removals={"key1"})
    assert (summary.removed, summary.updated, summary.missing) == (["key1"], [], [])
    assert _user_properties(cat, "ns") == {"key2": "value2", "key3": "value3", "key4": "value4"}


def test_missing_namespace_errors(any_catalog: Catalog) -> None:
    cat = any_catalog
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.update_namespace_properties("nope", updates={"a": "b"})
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_namespaces("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.create_table("nope.t", SCHEMA)
    assert not cat.table_exists("nope.t")


def test_multi_level_namespaces(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace(("org",), {"level": "1"})
    cat.create_namespace(("org", "sales"), {"level": "2"})
    cat.create_namespace(("org", "sales", "eu"), {"level": "3"})
    cat.create_namespace(("org", "hr"))
    cat.create_namespace(("orgs",))  # a prefix of a sibling must not leak into org's children
    assert sorted(cat.list_namespaces()) == [("org",), ("orgs",)]
    assert sorted(cat.list_namespaces("org")) == [("org", "hr"), ("org", "sales")]
    assert cat.list_namespaces(("org", "sales")) == [("org", "sales", "eu")]
    assert cat.list_namespaces(("org", "sales", "eu")) == []
    assert cat.load_namespace_properties("org.sales.eu")["level"] == "3"
    assert cat.load_namespace_properties(("org", "sales"))["level"] == "2"
    assert cat.namespace_exists("org.sales.eu")
    table = cat.create_table(("org", "sales", "eu", "orders"), SCHEMA)
    table.append(rows(0, 5))
    assert cat.list_tables(("org", "sales", "eu")) == [("org", "sales", "eu", "orders")]
    assert cat.list_tables(("org", "sales")) == []
    assert ids(cat.load_table("org.sales.eu.orders")) == list(range(5))
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace(("org", "sales", "eu"))


def test_child_namespace_implies_parent(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace(("a", "b"))
    assert cat.namespace_exists("a")
    assert cat.list_namespaces() == [("a",)]
    assert cat.list_namespaces("a") == [("a", "b")]
    assert cat.list_tables("a") == []
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace("a")
    cat.create_namespace(("x",))  # parent first, then a child sharing its prefix
    cat.create_namespace(("x", "child"))
    assert cat.list_namespaces("x") == [("x", "child")]


def test_namespace_names_with_sql_wildcards_match_only_themselves(any_catalog: Catalog) -> None:
    """``_`` and ``%`` are ordinary characters in names, never patterns."""
    cat = any_catalog
    for ns in [("db1",), ("db1", "ns1"), ("db2", "ns1"), ("db3", "ns1", "ns2")]:
        cat.create_namespace(ns)
        assert cat.namespace_exists(ns)
    assert cat.namespace_exists("db2")
    assert cat.namespace_exists("db3.ns1")
    assert not cat.namespace_exists("db_")
    assert not cat.namespace_exists("db%")
    for ns in ["db.ns1", "db.ns1.ns2", "db.ns2", "db.ns1X.ns3", "db_.ns1.ns2", "db%", "dbx.ns1"]:
        cat.create_namespace_if_not_exists(ns)
    assert cat.list_namespaces("db.ns1") == [("db", "ns1", "ns2")]
    assert cat.list_namespaces("db_.ns1") == [("db_", "ns1", "ns2")]
    assert sorted(cat.list_namespaces("db")) == [("db", "ns1"), ("db", "ns1X"), ("db", "ns2")]
    assert ("db%",) in cat.list_namespaces() and ("db_",) in cat.list_namespaces()


def test_drop_namespace(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    with pytest.raises(NamespaceNotEmptyError, match="Namespace ns is not empty"):
        cat.drop_namespace("ns")
    assert cat.namespace_exists("ns") and cat.table_exists("ns.t")
    cat.drop_table("ns.t")
    cat.drop_namespace("ns")
    assert not cat.namespace_exists("ns")
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace("ns")
