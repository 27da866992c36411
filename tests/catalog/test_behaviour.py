"""pyiceberg ``Catalog`` contract, run against RocksCatalog and against SqlCatalog (the reference).

Every test here takes ``any_catalog`` and so runs twice; a behaviour that passes on SqlCatalog
and fails on RocksCatalog is our bug. Deliberate differences live in test_rocks_only.py.
"""

from __future__ import annotations

import os

import pytest
from catalog_testlib import SCHEMA, ids, local_path, rows
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import LessThan
from pyiceberg.table.update import AssertTableUUID
from pyiceberg.types import LongType

# -- namespaces ----------------------------------------------------------------------------


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
    with pytest.raises(NoSuchTableError):
        cat.load_table("nope.t")


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


# -- tables --------------------------------------------------------------------------------


def test_create_load_list_exists(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    assert cat.list_tables("ns") == []
    table = cat.create_table("ns.t", SCHEMA, properties={"owner": "ana"})
    assert table.name() == ("ns", "t")
    assert cat.table_exists("ns.t") and cat.table_exists(("ns", "t"))
    assert not cat.table_exists("ns.other")
    assert cat.list_tables("ns") == [("ns", "t")]
    loaded = cat.load_table(("ns", "t"))
    assert loaded.metadata.table_uuid == table.metadata.table_uuid
    assert loaded.schema().as_arrow().names == ["id", "name"]
    assert loaded.properties["owner"] == "ana"
    assert loaded.current_snapshot() is None
    assert loaded.scan().to_arrow().num_rows == 0
    assert os.path.exists(local_path(loaded.metadata_location))
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table("ns.t", SCHEMA)
    assert cat.create_table_if_not_exists("ns.t", SCHEMA).metadata.table_uuid == table.metadata.table_uuid
    with pytest.raises(NoSuchTableError):
        cat.load_table("ns.missing")


def test_appends_and_scans(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    for i in range(5):
        table.append(rows(i * 10, 10))
    loaded = cat.load_table("ns.t")
    assert ids(loaded) == list(range(50))
    assert len(loaded.metadata.snapshots) == 5
    assert loaded.scan(row_filter=LessThan("id", 15)).to_arrow().num_rows == 15
    history = [s.snapshot_id for s in loaded.snapshots()]
    snapshot = loaded.snapshot_by_id(history[1])
    assert snapshot is not None
    assert loaded.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows == 20


def test_overwrite_and_delete(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows(0, 10))
    table.delete(LessThan("id", 4))
    assert ids(cat.load_table("ns.t")) == list(range(4, 10))
    table.overwrite(rows(100, 3))
    assert ids(cat.load_table("ns.t")) == [100, 101, 102]


def test_schema_evolution_and_properties(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows(0, 3))
    with table.update_schema() as update:
        update.add_column("score", LongType())
    with table.transaction() as tx:
        tx.set_properties(color="blue")
    loaded = cat.load_table("ns.t")
    assert loaded.schema().find_field("score").field_type == LongType()
    assert loaded.properties["color"] == "blue"
    assert loaded.scan().to_arrow().column("score").to_pylist() == [None, None, None]


def test_stale_handle_append_is_retried_without_losing_updates(any_catalog: Catalog) -> None:
    """pyiceberg retries an append whose snapshot requirement failed; both appends land."""
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA, properties={"commit.retry.min-wait-ms": "1"})
    first = cat.load_table("ns.t")
    second = cat.load_table("ns.t")
    first.append(rows(0, 3))
    second.append(rows(10, 3))
    loaded = cat.load_table("ns.t")
    assert ids(loaded) == [0, 1, 2, 10, 11, 12]
    assert len(loaded.metadata.snapshots) == 2


def test_stale_handle_append_conflicts_without_retries(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA, properties={"commit.retry.num-retries": "0"})
    first = cat.load_table("ns.t")
    second = cat.load_table("ns.t")
    first.append(rows(0, 3))
    with pytest.raises(CommitFailedException):
        second.append(rows(10, 3))
    second.refresh()
    second.append(rows(10, 3))
    assert ids(cat.load_table("ns.t")) == [0, 1, 2, 10, 11, 12]


def test_stale_handle_schema_change_keeps_other_commits(any_catalog: Catalog) -> None:
    """A schema change whose requirements still hold is applied on top of the latest metadata."""
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    stale = cat.load_table("ns.t")
    cat.load_table("ns.t").append(rows(0, 4))
    with stale.update_schema() as update:
        update.add_column("extra", LongType())
    loaded = cat.load_table("ns.t")
    assert ids(loaded) == [0, 1, 2, 3]
    assert "extra" in loaded.schema().as_arrow().names


def test_commit_table_requirement_failure(any_catalog: Catalog) -> None:
    import uuid

    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    with pytest.raises(CommitFailedException):
        cat.commit_table(table, (AssertTableUUID(uuid=uuid.uuid4()),), ())
    before = cat.load_table("ns.t").metadata_location
    # Requirements that hold and no updates: nothing changes.
    cat.commit_table(table, (AssertTableUUID(uuid=table.metadata.table_uuid),), ())
    assert cat.load_table("ns.t").metadata_location == before


def test_create_table_transaction(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    tx = cat.create_table_transaction("ns.t", SCHEMA, properties={"k": "v"})
    tx.append(rows(0, 7))
    assert not cat.table_exists("ns.t")
    tx.commit_transaction()
    loaded = cat.load_table("ns.t")
    assert ids(loaded) == list(range(7))
    assert loaded.properties["k"] == "v"
    assert loaded.metadata.format_version == 2
    loaded.append(rows(7, 1))
    assert ids(cat.load_table("ns.t")) == list(range(8))


def test_create_table_transaction_loses_to_concurrent_create(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    tx = cat.create_table_transaction("ns.t", SCHEMA)
    tx.append(rows(0, 2))
    cat.create_table("ns.t", SCHEMA).append(rows(100, 1))
    with pytest.raises(CommitFailedException, match="already exists"):
        tx.commit_transaction()
    assert ids(cat.load_table("ns.t")) == [100]


def test_append_through_handle_of_dropped_table_fails(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    stale = cat.create_table("ns.t", SCHEMA)
    cat.drop_table("ns.t")
    with pytest.raises((CommitFailedException, NoSuchTableError)):
        stale.append(rows(0, 1))
    assert not cat.table_exists("ns.t")
    # ... and through a handle of a table dropped and created again under the same name.
    stale = cat.create_table("ns.t", SCHEMA)
    cat.drop_table("ns.t")
    cat.create_table("ns.t", SCHEMA)
    # pyiceberg: the UUID requirement fails, and its retry refuses the refreshed (other) table.
    with pytest.raises((CommitFailedException, ValueError), match="UUID"):
        stale.append(rows(0, 1))
    assert cat.load_table("ns.t").scan().to_arrow().num_rows == 0


def test_drop_table_keeps_files_purge_removes_them(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    kept = cat.create_table("ns.kept", SCHEMA)
    kept.append(rows(0, 3))
    kept_meta = local_path(cat.load_table("ns.kept").metadata_location)
    cat.drop_table("ns.kept")
    assert not cat.table_exists("ns.kept")
    assert os.path.exists(kept_meta)
    with pytest.raises(NoSuchTableError):
        cat.drop_table("ns.kept")

    purged = cat.create_table("ns.purged", SCHEMA)
    purged.append(rows(0, 3))
    loaded = cat.load_table("ns.purged")
    data_files = [local_path(t.file.file_path) for t in loaded.scan().plan_files()]
    assert data_files and all(os.path.exists(p) for p in data_files)
    cat.purge_table("ns.purged")
    assert not cat.table_exists("ns.purged")
    assert not any(os.path.exists(p) for p in data_files)
    assert not os.path.exists(local_path(loaded.metadata_location))
    with pytest.raises(NoSuchTableError):
        cat.purge_table("ns.purged")


def test_rename_table(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("a")
    cat.create_namespace("b")
    table = cat.create_table("a.t", SCHEMA)
    table.append(rows(0, 4))
    renamed = cat.rename_table("a.t", "b.u")
    assert renamed.name() == ("b", "u")
    assert not cat.table_exists("a.t")
    assert cat.list_tables("a") == []
    assert cat.list_tables("b") == [("b", "u")]
    assert ids(cat.load_table("b.u")) == [0, 1, 2, 3]
    cat.load_table("b.u").append(rows(4, 1))
    assert ids(cat.load_table("b.u")) == [0, 1, 2, 3, 4]
    with pytest.raises(NoSuchTableError):
        cat.rename_table("a.t", "b.v")
    cat.create_table("a.other", SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        cat.rename_table("a.other", "b.u")
    with pytest.raises(NoSuchNamespaceError):
        cat.rename_table("a.other", "missing.x")
    assert cat.table_exists("a.other")


def test_register_table(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows(0, 6))
    location = cat.load_table("ns.t").metadata_location
    registered = cat.register_table("ns.copy", location)
    assert registered.metadata_location == location
    assert ids(cat.load_table("ns.copy")) == list(range(6))
    with pytest.raises(TableAlreadyExistsError):
        cat.register_table("ns.copy", location)
    with pytest.raises(NoSuchNamespaceError):
        cat.register_table("missing.copy", location)
    assert sorted(cat.list_tables("ns")) == [("ns", "copy"), ("ns", "t")]


def test_drop_namespace_with_table_refused(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("ns")
    assert cat.namespace_exists("ns") and cat.table_exists("ns.t")
    cat.drop_table("ns.t")
    cat.drop_namespace("ns")
    assert not cat.namespace_exists("ns")


def test_child_namespace_implies_parent(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace(("a", "b"))
    assert cat.namespace_exists("a")
    assert cat.list_namespaces() == [("a",)]
    assert cat.list_namespaces("a") == [("a", "b")]
    assert cat.list_tables("a") == []
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace("a")


def test_partitioned_table_with_sort_order(any_catalog: Catalog) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.sorting import SortField, SortOrder
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="id_bucket"))
    order = SortOrder(SortField(source_id=2, transform=IdentityTransform()))
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.p", schema, partition_spec=spec, sort_order=order)
    table.append(rows(0, 20))
    loaded = cat.load_table("ns.p")
    assert loaded.spec().fields[0].name == "id_bucket"
    assert loaded.sort_order().fields[0].source_id == 2
    assert ids(loaded) == list(range(20))
    assert len(list(loaded.scan().plan_files())) > 1  # one file per bucket written


def test_table_locations(any_catalog: Catalog, tmp_path: os.PathLike[str]) -> None:
    cat = any_catalog
    ns_location = f"{tmp_path}/elsewhere/ns_loc"
    cat.create_namespace("located", {"location": ns_location})
    in_ns = cat.create_table("located.t", SCHEMA)
    assert local_path(in_ns.location()) == f"{ns_location}/t"
    explicit = f"{tmp_path}/explicit/table"
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA, location=explicit + "/")
    assert local_path(table.location()) == explicit
    table.append(rows(0, 2))
    loaded = cat.load_table("ns.t")
    assert local_path(loaded.metadata_location).startswith(explicit + "/metadata/")
    assert all(local_path(t.file.file_path).startswith(explicit + "/data/") for t in loaded.scan().plan_files())
    assert ids(loaded) == [0, 1]
