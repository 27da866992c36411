"""Odd and hostile names, missing namespaces, non-empty drops: precise errors, nothing written.

RocksCatalog validates names (they become folders and RocksDB keys); SqlCatalog stores almost
anything, so these tests are RocksCatalog-only. "Nothing written" is checked against the
whole key space of the catalog database and the warehouse folder listing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from catalog_testlib import SCHEMA, ids, rows
from pydantic import ValidationError
from pyiceberg.exceptions import (
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
)

from catalog import RocksCatalog
from catalog.names import EmptyNamespaceError, InvalidNameError

BAD_NAMES = [
    "",
    ".",
    "..",
    "/",
    "a/b",
    "../escape",
    "a\\b",
    "a\x00b",
    "a\x1fb",  # our namespace level separator
    "tab\there",
    "x" * 256,
    "é" * 128,  # 256 bytes in UTF-8
    " leading",
    "trailing ",
    "   ",
    "zero\u200bwidth",  # format character
]


def snapshot_state(cat: RocksCatalog, warehouse: Path) -> tuple[list[tuple[bytes, bytes]], list[str]]:
    keys = list(cat.store.scan(b""))
    files = sorted(str(p.relative_to(warehouse)) for p in warehouse.rglob("*") if "catalog.rocksdb" not in p.parts)
    return keys, files


@pytest.fixture
def populated(tmp_path: Path) -> tuple[RocksCatalog, Path]:
    warehouse = tmp_path / "warehouse"
    cat = RocksCatalog("test", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows(0, 3))
    return cat, warehouse


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
def test_bad_names_refused_and_nothing_written(populated: tuple[RocksCatalog, Path], bad: str) -> None:
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    head = cat.log.head()
    with pytest.raises(InvalidNameError):
        cat.create_namespace((bad,))
    with pytest.raises(InvalidNameError):
        cat.create_namespace(("ns", bad))
    with pytest.raises(InvalidNameError):
        cat.create_table(("ns", bad), SCHEMA)
    with pytest.raises(InvalidNameError):
        cat.create_table((bad, "t"), SCHEMA)
    with pytest.raises(InvalidNameError):
        cat.create_table_transaction(("ns", bad), SCHEMA)
    with pytest.raises(InvalidNameError):
        cat.register_table(("ns", bad), cat.load_table("ns.t").metadata_location)
    with pytest.raises(InvalidNameError):
        cat.rename_table("ns.t", ("ns", bad))
    # Reads and drops of a name that cannot exist answer "not found".
    with pytest.raises(NoSuchTableError):
        cat.load_table(("ns", bad))
    with pytest.raises(NoSuchTableError):
        cat.drop_table(("ns", bad))
    with pytest.raises(NoSuchTableError):
        cat.purge_table(("ns", bad))
    with pytest.raises(NoSuchTableError):
        cat.rename_table(("ns", bad), "ns.u")
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties((bad,))
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace((bad,))
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables((bad,))
    with pytest.raises(NoSuchNamespaceError):
        cat.update_namespace_properties((bad,), updates={"a": "b"})
    assert not cat.table_exists(("ns", bad))
    assert not cat.namespace_exists((bad,))
    assert cat.log.head() == head
    assert snapshot_state(cat, warehouse) == before
    assert ids(cat.load_table("ns.t")) == [0, 1, 2]
    cat.close()


@pytest.mark.parametrize("identifier", ["t", "", "..", ".t", "ns.", "ns..t"], ids=repr)
def test_bad_string_identifiers(populated: tuple[RocksCatalog, Path], identifier: str) -> None:
    """String identifiers are split on '.': empty levels and a missing namespace are refused."""
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    with pytest.raises(InvalidNameError):
        cat.create_table(identifier, SCHEMA)
    with pytest.raises(NoSuchTableError):
        cat.load_table(identifier)
    assert not cat.table_exists(identifier)
    assert snapshot_state(cat, warehouse) == before
    cat.close()


def test_invalid_name_error_is_a_value_error() -> None:
    assert issubclass(InvalidNameError, ValueError)


@pytest.mark.parametrize("name", ["naïve", "数据", "🧊floe", "Ünïcødé tab le", "a-b_c$d", "x" * 255])
def test_unusual_but_valid_names_round_trip(tmp_path: Path, name: str) -> None:
    warehouse = tmp_path / "warehouse"
    cat = RocksCatalog("test", warehouse=str(warehouse))
    cat.create_namespace((name,), {"k": name})
    table = cat.create_table((name, name), SCHEMA)
    table.append(rows(0, 2))
    short = name[:100]
    cat.create_namespace((short, short))
    cat.create_table((short, short, name), SCHEMA).append(rows(5, 1))
    cat.close()
    cat = RocksCatalog("test", warehouse=str(warehouse))
    assert sorted(cat.list_namespaces()) == sorted({(name,), (short,)})
    assert cat.list_namespaces((short,)) == [(short, short)]
    assert cat.list_tables((short, short)) == [(short, short, name)]
    assert cat.load_namespace_properties((name,)) == {"k": name}
    assert ids(cat.load_table((name, name))) == [0, 1]
    assert ids(cat.load_table((short, short, name))) == [5]
    # Every file stays inside the warehouse.
    for path in warehouse.rglob("*"):
        assert os.path.realpath(path).startswith(os.path.realpath(warehouse))
    cat.close()


def test_namespace_folder_name_too_long(populated: tuple[RocksCatalog, Path]) -> None:
    """Levels are joined with '.' into one folder name, which may not exceed 255 bytes."""
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    with pytest.raises(InvalidNameError, match="255 bytes"):
        cat.create_namespace(("x" * 200, "y" * 60))
    assert snapshot_state(cat, warehouse) == before
    cat.create_namespace(("x" * 200, "y" * 54))  # exactly 255 bytes
    cat.close()


def test_missing_namespace_and_non_empty_drops_write_nothing(populated: tuple[RocksCatalog, Path]) -> None:
    cat, warehouse = populated
    cat.create_namespace(("ns", "child"))
    before = snapshot_state(cat, warehouse)
    head = cat.log.head()
    with pytest.raises(NoSuchNamespaceError):
        cat.create_table("missing.t", SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        cat.create_table_transaction("missing.t", SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        cat.rename_table("ns.t", "missing.t")
    with pytest.raises(NoSuchNamespaceError):
        cat.register_table("missing.t", cat.load_table("ns.t").metadata_location)
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("ns")
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace("missing")
    assert cat.log.head() == head
    assert snapshot_state(cat, warehouse) == before
    cat.close()


@pytest.mark.parametrize("namespace", ["", (), ("",), ("ns", " "), "ns.", "  "], ids=repr)
def test_empty_namespace_is_no_such_namespace_and_an_invalid_name(
    populated: tuple[RocksCatalog, Path], namespace: object
) -> None:
    """As pyiceberg's reference catalogs answer; callers that catch InvalidNameError still do."""
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    with pytest.raises(EmptyNamespaceError) as created:
        cat.create_namespace(namespace)  # type: ignore[arg-type]
    assert isinstance(created.value, NoSuchNamespaceError) and isinstance(created.value, InvalidNameError)
    assert "empty" in str(created.value)
    assert snapshot_state(cat, warehouse) == before
    cat.close()


def test_names_refused_for_their_characters_stay_invalid_names(populated: tuple[RocksCatalog, Path]) -> None:
    cat, _ = populated
    for bad in (" leading", "a/b", "tab\there"):
        with pytest.raises(InvalidNameError) as refused:
            cat.create_namespace((bad,))
        assert not isinstance(refused.value, NoSuchNamespaceError)
    cat.close()


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({None: "value"}, "namespace property keys must be strings"),
        ({"key": None}, "namespace property 'key' has no value"),
        ({"key": ["a"]}, "namespace property 'key' must be a string"),
    ],
    ids=["None key", "None value", "list value"],
)
def test_namespace_properties_must_be_strings(
    populated: tuple[RocksCatalog, Path], properties: dict[object, object], message: str
) -> None:
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    with pytest.raises(ValueError, match=message):
        cat.create_namespace("fresh", properties)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        cat.update_namespace_properties("ns", updates=properties)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be strings"):
        cat.update_namespace_properties("ns", removals={None})  # type: ignore[arg-type]
    assert snapshot_state(cat, warehouse) == before
    assert cat.load_namespace_properties("ns") == {}
    cat.close()


def test_table_properties_must_be_strings(populated: tuple[RocksCatalog, Path]) -> None:
    cat, warehouse = populated
    before = snapshot_state(cat, warehouse)
    # pyiceberg's own ValidationError and wording, as its SqlCatalog raises (a ValueError too)
    with pytest.raises(ValidationError, match="None type is not a supported value in properties: k"):
        cat.create_table("ns.fresh", SCHEMA, properties={"k": None})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="table property keys must be strings"):
        cat.create_table_transaction("ns.fresh", SCHEMA, properties={None: "v"})  # type: ignore[dict-item]
    assert snapshot_state(cat, warehouse) == before
    made = cat.create_table("ns.typed", SCHEMA, properties={"n": 7, "flag": True})  # type: ignore[dict-item]
    assert (made.properties["n"], made.properties["flag"]) == ("7", "true")
    cat.close()
