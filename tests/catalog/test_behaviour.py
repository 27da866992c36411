"""pyiceberg's ``Catalog`` contract for tables, run against RocksCatalog (over a path, a
file:// URI and an s3:// warehouse) and SqlCatalog, the reference.

The cases follow the generic ones pyiceberg's own suite (tests/catalog/test_catalog_behaviors.py)
runs against its reference catalogs, plus our own. Every test takes ``any_catalog`` and so runs
four times (RocksCatalog over a path, a file:// URI and an s3:// warehouse on a real S3
server); a behaviour that passes on SqlCatalog and fails on RocksCatalog is our bug.
Namespaces: test_behaviour_namespaces.py; commits and transactions:
test_behaviour_commits.py; deliberate differences: test_rocks_only.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from catalog_testlib import NESTED, SCHEMA, as_uri, file_exists, ids, local_path, rows
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import LessThan
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType


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
    assert file_exists(cat, loaded.metadata_location)
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


def test_drop_table_keeps_files_purge_removes_them(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    kept = cat.create_table("ns.kept", SCHEMA)
    kept.append(rows(0, 3))
    kept_meta = cat.load_table("ns.kept").metadata_location
    cat.drop_table("ns.kept")
    assert not cat.table_exists("ns.kept")
    assert file_exists(cat, kept_meta)
    with pytest.raises(NoSuchTableError):
        cat.drop_table("ns.kept")

    purged = cat.create_table("ns.purged", SCHEMA)
    purged.append(rows(0, 3))
    loaded = cat.load_table("ns.purged")
    data_files = [t.file.file_path for t in loaded.scan().plan_files()]
    assert data_files and all(file_exists(cat, p) for p in data_files)
    cat.purge_table("ns.purged")
    assert not cat.table_exists("ns.purged")
    assert not any(file_exists(cat, p) for p in data_files)
    assert not file_exists(cat, loaded.metadata_location)
    with pytest.raises(NoSuchTableError):
        cat.purge_table("ns.purged")


def _table_a_t_and_namespace_b(cat: Catalog) -> Table:
    cat.create_namespace("a")
    cat.create_namespace("b")
    return cat.create_table("a.t", SCHEMA)


def test_rename_table(any_catalog: Catalog) -> None:
    cat = any_catalog
    table = _table_a_t_and_namespace_b(cat)
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
    cat.drop_table("ns.t")  # its files stay; a folder belongs to one table at a time
    registered = cat.register_table("ns.copy", location)
    assert registered.metadata_location == location
    assert ids(cat.load_table("ns.copy")) == list(range(6))
    with pytest.raises(TableAlreadyExistsError):
        cat.register_table("ns.copy", location)
    with pytest.raises(NoSuchNamespaceError):
        cat.register_table("missing.copy", location)
    assert sorted(cat.list_tables("ns")) == [("ns", "copy")]


def test_partitioned_table_with_sort_order(any_catalog: Catalog) -> None:
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


def test_table_locations(any_catalog: Catalog, given_warehouse: str) -> None:
    cat = any_catalog
    # Inside the warehouse: RocksCatalog refuses folders outside it (catalog.sandbox).
    ns_location = f"{given_warehouse}/elsewhere/ns_loc"
    cat.create_namespace("located", {"location": ns_location})
    in_ns = cat.create_table("located.t", SCHEMA)
    assert local_path(in_ns.location()) == local_path(f"{ns_location}/t")
    explicit = local_path(f"{given_warehouse}/explicit/table")
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA, location=explicit + "/")
    assert local_path(table.location()) == explicit
    table.append(rows(0, 2))
    loaded = cat.load_table("ns.t")
    assert local_path(loaded.metadata_location).startswith(explicit + "/metadata/")
    assert all(local_path(t.file.file_path).startswith(explicit + "/data/") for t in loaded.scan().plan_files())
    assert ids(loaded) == [0, 1]


def test_load_table_by_its_own_name(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    loaded = cat.load_table(table.name())
    assert loaded == cat.load_table("ns.t")
    assert loaded.metadata == table.metadata and loaded.metadata_location == table.metadata_location
    assert loaded.schema() == NESTED


def test_sort_orders_and_format_versions(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    default = cat.create_table("ns.default", NESTED)
    assert default.sort_order().order_id == 0 and default.sort_order().is_unsorted
    assert default.format_version == 2
    v1 = cat.create_table("ns.v1", NESTED, properties={"format-version": "1"})
    assert v1.format_version == 1 and v1.spec() == UNPARTITIONED_PARTITION_SPEC
    assert v1.sort_order().is_unsorted
    order = SortOrder(SortField(source_id=2, transform=IdentityTransform(), null_order=NullOrder.NULLS_FIRST))
    custom = cat.create_table("ns.sorted", NESTED, sort_order=order)
    got = cat.load_table("ns.sorted").sort_order()
    assert got.order_id == 1 and len(got.fields) == 1
    assert got.fields[0].direction == SortDirection.ASC and got.fields[0].null_order == NullOrder.NULLS_FIRST
    assert isinstance(got.fields[0].transform, IdentityTransform)
    assert custom.sort_order() == got


def test_table_properties_are_strings(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA, properties={"answer": 42})  # type: ignore[dict-item]
    assert cat.load_table("ns.t").properties["answer"] == "42" == table.properties["answer"]
    for bad in ({"key": None}, {None: "value"}):
        with pytest.raises(ValueError):
            cat.create_table("ns.bad", SCHEMA, properties=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            cat.create_table_transaction("ns.bad", SCHEMA, properties=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            table.transaction().set_properties(bad).commit_transaction()  # type: ignore[arg-type]
    assert not cat.table_exists("ns.bad")
    assert "key" not in cat.load_table("ns.t").properties


def test_default_locations_under_the_warehouse(any_catalog: Catalog, catalog_kind: str, given_warehouse: str,
                                               warehouse_uri: str) -> None:
    """Tables go to ``<warehouse>/<namespace>/<table>``. RocksCatalog hands every local location
    out as a ``file://`` URI, however the warehouse was given (as pyiceberg's own suite expects of
    its catalogs); SqlCatalog keeps the form it was given."""
    cat = any_catalog
    base = given_warehouse if catalog_kind == "sql" else warehouse_uri
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    table.append(rows(0, 2))
    loaded = cat.load_table("ns.t")
    assert loaded.location() == f"{base}/ns/t"
    assert loaded.metadata_location.startswith(f"{base}/ns/t/metadata/")
    assert loaded.metadata.metadata_log[0].metadata_file.startswith(f"{base}/ns/t/metadata/")
    assert all(t.file.file_path.startswith(f"{base}/ns/t/data/") for t in loaded.scan().plan_files())
    manifests = loaded.current_snapshot().manifests(loaded.io)  # type: ignore[union-attr]
    assert all(m.manifest_path.startswith(f"{base}/ns/t/metadata/") for m in manifests)
    assert loaded.current_snapshot().manifest_list.startswith(f"{base}/ns/t/metadata/")  # type: ignore[union-attr]
    assert file_exists(cat, loaded.metadata_location)


def test_explicit_location_is_kept_as_given(any_catalog: Catalog, warehouse_uri: str) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    uri = f"{warehouse_uri}/given/location"
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="x"))
    table = cat.create_table("ns.t", NESTED, location=uri + "/", partition_spec=spec, properties={"k": "v"})
    assert table.location() == uri
    assert cat.load_table("ns.t") == table
    assert table.metadata_location.startswith(f"{uri}/metadata/")


def test_metadata_path_property(any_catalog: Catalog, warehouse_uri: str) -> None:
    """``write.metadata.path`` moves metadata files and manifests; the table location stays."""
    cat = any_catalog
    cat.create_namespace("ns")
    located = f"{warehouse_uri}/located"
    custom = f"{located}/custom/metadata"  # under the table's own folder (catalog.sandbox)
    table = cat.create_table("ns.t", SCHEMA, location=located,
                             properties={TableProperties.WRITE_METADATA_PATH: custom})
    table.append(rows(0, 1))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.manifests(table.io)[0].manifest_path.startswith(custom)
    assert table.metadata_location.startswith(custom)
    assert table.location() != custom
    other = cat.create_table("ns.u", SCHEMA)
    assert other.location_provider().new_metadata_location("m.json") == f"{other.location()}/metadata/m.json"
    moved = f"{as_uri(other.location())}/moved"
    other.transaction().set_properties({TableProperties.WRITE_METADATA_PATH: moved}).commit_transaction()
    assert other.location_provider().new_metadata_location("m.json") == f"{moved}/m.json"
    assert cat.load_table("ns.u").metadata_location.startswith(moved)


def test_append_snapshot_summary(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", SCHEMA)
    data = rows(0, 1)
    table.append(data)
    [snapshot] = table.metadata.snapshots
    assert snapshot.snapshot_id == table.metadata.current_snapshot_id
    assert snapshot.parent_snapshot_id is None and snapshot.sequence_number == 1
    assert snapshot.summary is not None and snapshot.summary.operation == Operation.APPEND
    for key in ("added-data-files", "added-records", "total-data-files", "total-records"):
        assert snapshot.summary[key] == "1"
    assert len(table.metadata.metadata_log) == 1
    assert cat.load_table("ns.t").scan().to_arrow() == data


def test_list_tables_per_namespace(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("a")
    cat.create_namespace(("new", "namespace"))
    cat.create_table("a.t1", SCHEMA)
    cat.create_table("a.t2", SCHEMA)
    assert sorted(cat.list_tables("a")) == [("a", "t1"), ("a", "t2")]
    assert cat.list_tables(("new", "namespace")) == []
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("missing")


def test_rename_and_drop_by_the_table_s_own_name(any_catalog: Catalog) -> None:
    cat = any_catalog
    table = _table_a_t_and_namespace_b(cat)
    renamed = cat.rename_table(table.name(), ("b", "u"))
    assert renamed.name() == ("b", "u")
    assert cat.load_table(("b", "u")).metadata_location == table.metadata_location
    with pytest.raises(NoSuchTableError):
        cat.load_table(table.name())
    cat.drop_table(renamed.name())
    with pytest.raises(NoSuchTableError, match="Table does not exist: b.u"):
        cat.load_table(("b", "u"))
    with pytest.raises(NoSuchTableError):
        cat.drop_table(("b", "u"))


def test_purged_table_is_gone(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    cat.purge_table("ns.t")
    with pytest.raises(NoSuchTableError, match="Table does not exist: ns.t"):
        cat.load_table("ns.t")


def test_register_table_keeps_the_metadata_location(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    source = cat.create_table("ns.source", NESTED)
    cat.drop_table("ns.source")
    registered = cat.register_table(("ns", "again"), source.metadata_location)
    assert registered.name() == ("ns", "again")
    assert registered.metadata_location == source.metadata_location
    assert registered.schema() == NESTED
    with pytest.raises(TableAlreadyExistsError):
        cat.register_table(("ns", "again"), source.metadata_location)


@pytest.mark.parametrize("format_version", [1, 2])
def test_merge_manifests_on_append(any_catalog: Catalog, format_version: int) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    props = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2",
             "format-version": str(format_version)}
    table = cat.create_table("ns.t", SCHEMA, properties=props)
    for i in range(5):
        table.append(rows(i * 3, 3))
    assert ids(table) == list(range(15))
    snapshot = table.current_snapshot()
    assert snapshot is not None and len(snapshot.manifests(table.io)) == 1


def test_pyarrow_schema_with_required_and_large_columns(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    data = pa.table(
        [pa.array([None, "A", "B", "C"]), pa.array([1, 2, 3, 4], pa.int32()), pa.array([True, None, False, True])],
        schema=pa.schema([
            pa.field("foo", pa.large_string(), nullable=True),
            pa.field("bar", pa.int32(), nullable=False),
            pa.field("baz", pa.bool_(), nullable=True),
        ]),
    )
    table = cat.create_table("ns.t", data.schema)
    assert [(f.name, f.required) for f in table.schema().fields] == [("foo", False), ("bar", True), ("baz", False)]
    table.append(data)
    back = cat.load_table("ns.t").scan().to_arrow()
    assert back.column("bar").to_pylist() == [1, 2, 3, 4]
    assert back.column("foo").to_pylist() == [None, "A", "B", "C"]
