"""RocksCatalog commits as Iceberg-Java's catalogs behave: requirement failures in Java's
wording (engines and Iceberg's CatalogTests match on it), "already exists" messages, and ids
of added schemas, specs and sort orders assigned fresh when the client's id is taken."""

from __future__ import annotations

import uuid

import pytest
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
)
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from catalog import RocksCatalog

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def _commit(cat: RocksCatalog, *requirements: object, updates: tuple[object, ...] = ()) -> object:
    return cat.commit_tables([("ns.t", requirements, updates)])[0]  # type: ignore[list-item]


@pytest.fixture
def cat(rocks: RocksCatalog) -> RocksCatalog:
    rocks.create_namespace("ns")
    rocks.create_table("ns.t", SCHEMA)
    return rocks


def test_already_exists_messages_are_iceberg_javas(cat: RocksCatalog) -> None:
    with pytest.raises(TableAlreadyExistsError, match=r"^Table already exists: ns\.t$"):
        cat.create_table("ns.t", SCHEMA)
    with pytest.raises(NamespaceAlreadyExistsError, match=r"^Namespace already exists: ns$"):
        cat.create_namespace("ns")
    cat.create_table("ns.u", SCHEMA)
    with pytest.raises(TableAlreadyExistsError, match=r"^Table already exists: ns\.u$"):
        cat.rename_table("ns.t", "ns.u")


@pytest.mark.parametrize(("requirement", "message"), [
    (AssertCreate(), "Requirement failed: table already exists"),
    (AssertCurrentSchemaId(current_schema_id=3), "Requirement failed: current schema changed: expected id 3 != 0"),
    (AssertLastAssignedFieldId(last_assigned_field_id=7),
     "Requirement failed: last assigned field id changed: expected id 7 != 2"),
    (AssertLastAssignedPartitionId(last_assigned_partition_id=1003),
     "Requirement failed: last assigned partition id changed: expected id 1003 != 999"),
    (AssertDefaultSpecId(default_spec_id=4), "Requirement failed: default partition spec changed: expected id 4 != 0"),
    (AssertDefaultSortOrderId(default_sort_order_id=5),
     "Requirement failed: default sort order changed: expected id 5 != 0"),
    (AssertRefSnapshotId(ref="main", snapshot_id=12), "Requirement failed: branch or tag main is missing, expected 12"),
])
def test_requirement_failures_use_iceberg_javas_wording(cat: RocksCatalog, requirement: object, message: str) -> None:
    before = cat.load_table("ns.t").metadata_location
    with pytest.raises(CommitFailedException) as failed:
        _commit(cat, requirement, updates=(SetCurrentSchemaUpdate(schema_id=0),))
    assert str(failed.value) == message
    assert cat.load_table("ns.t").metadata_location == before


def test_uuid_and_ref_requirements_use_iceberg_javas_wording(cat: RocksCatalog) -> None:
    import pyarrow as pa

    table = cat.load_table("ns.t")
    other = uuid.uuid4()
    with pytest.raises(CommitFailedException) as failed:
        _commit(cat, AssertTableUUID(uuid=other))
    # Java's order: the table's UUID, then the one the client expected
    expected = f"Requirement failed: UUID does not match: expected {table.metadata.table_uuid} != {other}"
    assert str(failed.value) == expected
    table.append(pa.table({"id": [1], "name": ["a"]}))
    head = cat.load_table("ns.t").metadata.current_snapshot_id
    with pytest.raises(CommitFailedException) as failed:
        _commit(cat, AssertRefSnapshotId(ref="main", snapshot_id=None))
    assert str(failed.value) == "Requirement failed: branch main was created concurrently"
    with pytest.raises(CommitFailedException) as failed:
        _commit(cat, AssertRefSnapshotId(ref="main", snapshot_id=42))
    assert str(failed.value) == f"Requirement failed: branch main has changed: expected id 42 != {head}"


def _order(field_id: int, order_id: int) -> SortOrder:
    return SortOrder(SortField(source_id=field_id, transform=IdentityTransform()), order_id=order_id)


def test_added_sort_order_with_a_taken_id_gets_a_fresh_one(cat: RocksCatalog) -> None:
    # Two REPLACE transactions racing: both number their new order 1 from the same base.
    first = _commit(cat, updates=(AddSortOrderUpdate(sort_order=_order(1, 1)),
                                  SetDefaultSortOrderUpdate(sort_order_id=-1)))
    assert first.metadata.default_sort_order_id == 1  # type: ignore[attr-defined]
    second = _commit(cat, updates=(AddSortOrderUpdate(sort_order=_order(2, 1)),
                                   SetDefaultSortOrderUpdate(sort_order_id=1)))
    metadata = cat.load_table("ns.t").metadata
    assert [o.order_id for o in metadata.sort_orders] == [0, 1, 2]
    assert metadata.default_sort_order_id == 2 and metadata.sort_order().fields[0].source_id == 2
    assert second.metadata == metadata  # type: ignore[attr-defined]
    # An order equal to one the table has reuses its id: nothing new is added.
    _commit(cat, updates=(AddSortOrderUpdate(sort_order=_order(1, 7)), SetDefaultSortOrderUpdate(sort_order_id=-1)))
    metadata = cat.load_table("ns.t").metadata
    assert [o.order_id for o in metadata.sort_orders] == [0, 1, 2] and metadata.default_sort_order_id == 1


def test_added_spec_and_schema_with_taken_ids_get_fresh_ones(cat: RocksCatalog) -> None:
    bucket = PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"), spec_id=0)
    _commit(cat, updates=(AddPartitionSpecUpdate(spec=bucket), SetDefaultSpecUpdate(spec_id=0)))
    metadata = cat.load_table("ns.t").metadata
    assert [s.spec_id for s in metadata.partition_specs] == [0, 1] and metadata.default_spec_id == 1
    wider = Schema(*SCHEMA.fields, NestedField(3, "extra", LongType(), required=False), schema_id=0)
    _commit(cat, updates=(AddSchemaUpdate(schema_=wider), SetCurrentSchemaUpdate(schema_id=0)))
    metadata = cat.load_table("ns.t").metadata
    assert [s.schema_id for s in metadata.schemas] == [0, 1]
    assert metadata.current_schema_id == 1 and metadata.schema().find_field("extra")
    # The first schema again: Iceberg reuses id 0 instead of adding a copy.
    _commit(cat, updates=(AddSchemaUpdate(schema_=Schema(*SCHEMA.fields, schema_id=5)),
                          SetCurrentSchemaUpdate(schema_id=-1)))
    metadata = cat.load_table("ns.t").metadata
    assert [s.schema_id for s in metadata.schemas] == [0, 1] and metadata.current_schema_id == 0


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_metadata_location_carries_the_file_scheme(tmp_path: object, scheme: str) -> None:
    """Whether the warehouse was given as a plain path or a file:// URI, the locations reported
    are file:// URIs: pyiceberg's own behaviour suite (test_create_table_with_default_warehouse_location)
    checks ``metadata_location.startswith(f"file://{warehouse}")`` and slices ``len("file://")``
    off it. (pyiceberg's SqlCatalog keeps a plain path plain; its suite never gives it one.)"""
    import os

    cat = RocksCatalog("r", warehouse=f"{scheme}{tmp_path}/wh")
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.t", SCHEMA)
        table = cat.load_table("ns.t")
        assert table.metadata_location.startswith(f"file://{tmp_path}/wh")
        assert os.path.exists(table.metadata_location[len("file://"):])
        assert table.location() == f"file://{tmp_path}/wh/ns/t"
    finally:
        cat.close()


def test_none_table_property_raises_pyicebergs_validation_error(cat: RocksCatalog) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="None type is not a supported value in properties: k"):
        cat.create_table("ns.none", SCHEMA, properties={"k": None})  # type: ignore[dict-item]
    assert not cat.table_exists("ns.none")


def test_load_after_the_metadata_file_was_removed_fails_precisely(rocks: RocksCatalog, tmp_path: object) -> None:
    """The cache serves a metadata file only while it exists: before and after a restart, a
    load of a table whose metadata file is gone fails with Iceberg-Java's message; the table
    is still listed and can be dropped."""
    import os

    from pyiceberg.exceptions import NoSuchTableError

    from catalog import MetadataFileMissingError

    rocks.create_namespace("ns")
    location = rocks.create_table("ns.gone", SCHEMA).metadata_location
    rocks.load_table("ns.gone")  # cached now
    os.remove(location.removeprefix("file://"))
    with pytest.raises(MetadataFileMissingError, match=f"^Failed to open input stream for file: {location}$"):
        rocks.load_table("ns.gone")
    with pytest.raises(NoSuchTableError):  # what callers that know only pyiceberg's errors catch
        rocks.load_table("ns.gone")
    warehouse = rocks.warehouse
    rocks.close()
    again = RocksCatalog("test", warehouse=warehouse)
    try:
        assert again.table_exists("ns.gone") and ("ns", "gone") in again.list_tables("ns")
        with pytest.raises(MetadataFileMissingError, match="Failed to open input stream for file"):
            again.load_table("ns.gone")
        again.drop_table("ns.gone")
        assert not again.table_exists("ns.gone")
    finally:
        again.close()


def test_a_create_transaction_cannot_take_a_views_name(cat: RocksCatalog) -> None:
    from pyiceberg.view.metadata import ViewVersion

    cat.create_view("ns.v", SCHEMA, ViewVersion(**{  # type: ignore[arg-type]
        "version-id": 1, "schema-id": 0, "default-namespace": ["ns"],
        "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "duckdb"}]}))
    tx = cat.create_table_transaction("ns.v", SCHEMA)
    with pytest.raises(TableAlreadyExistsError, match="View with same name already exists: ns.v"):
        tx.commit_transaction()
    assert not cat.table_exists("ns.v") and cat.view_exists("ns.v")
