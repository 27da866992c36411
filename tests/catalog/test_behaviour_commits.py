"""pyiceberg's ``Catalog`` contract for commits: metadata versions, schema changes, conflicts
between stale handles, transactions. Run against RocksCatalog (over a path and over a file://
URI) and SqlCatalog, the reference, as in test_behaviour.py.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from catalog_testlib import NESTED, SCHEMA, file_exists, ids, rows
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.update import AddSchemaUpdate, AssertTableUUID, SetCurrentSchemaUpdate
from pyiceberg.types import IntegerType, LongType, NestedField


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


def _two_handles(cat: Catalog, properties: dict[str, str]) -> tuple[Table, Table]:
    """Two handles of one new table ns.t, loaded before either commits."""
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA, properties=properties)
    return cat.load_table("ns.t"), cat.load_table("ns.t")


def test_stale_handle_append_is_retried_without_losing_updates(any_catalog: Catalog) -> None:
    """pyiceberg retries an append whose snapshot requirement failed; both appends land."""
    cat = any_catalog
    first, second = _two_handles(cat, {"commit.retry.min-wait-ms": "1"})
    first.append(rows(0, 3))
    second.append(rows(10, 3))
    loaded = cat.load_table("ns.t")
    assert ids(loaded) == [0, 1, 2, 10, 11, 12]
    assert len(loaded.metadata.snapshots) == 2


def test_stale_handle_append_conflicts_without_retries(any_catalog: Catalog) -> None:
    cat = any_catalog
    first, second = _two_handles(cat, {"commit.retry.num-retries": "0"})
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


def test_commit_writes_a_new_metadata_version(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    first_location, first_ms = table.metadata_location, table.metadata.last_updated_ms
    assert cat._parse_metadata_version(first_location) == 0  # type: ignore[attr-defined]
    assert table.metadata.current_schema_id == 0
    tx = table.transaction()
    update = tx.update_schema()
    update.add_column(path="b", field_type=IntegerType())
    update.commit()
    tx.commit_transaction()
    assert cat._parse_metadata_version(table.metadata_location) == 1  # type: ignore[attr-defined]
    assert table.metadata.current_schema_id == 1 and len(table.metadata.schemas) == 2
    assert table.schema().find_field("b").field_type == IntegerType()
    assert table.metadata.last_updated_ms > first_ms
    [entry] = table.metadata.metadata_log
    assert (entry.metadata_file, entry.timestamp_ms) == (first_location, first_ms)
    assert cat.load_table("ns.t").metadata == table.metadata


def test_commit_table_applies_schema_updates(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    new_schema = Schema(
        NestedField(1, "x", LongType()),
        NestedField(2, "y", LongType(), doc="comment"),
        NestedField(3, "z", LongType()),
        NestedField(4, "add", LongType()),
    )
    response = cat.commit_table(table, requirements=(), updates=(AddSchemaUpdate(schema=new_schema),
                                                                 SetCurrentSchemaUpdate(schema_id=-1)))
    assert response.metadata.table_uuid == table.metadata.table_uuid
    assert len(response.metadata.schemas) == 2
    assert response.metadata.schemas[1] == new_schema
    # new_schema says id 0, which the table's first schema has. pyiceberg's catalogs keep it
    # (two schemas with id 0); RocksCatalog assigns a fresh id as Iceberg-Java does.
    expected_id = new_schema.schema_id if type(cat).__name__ == "SqlCatalog" else 1
    assert response.metadata.current_schema_id == expected_id
    if expected_id == 1:  # (SqlCatalog's schema() finds the first of the two with id 0)
        assert response.metadata.schema() == new_schema
    assert cat.load_table("ns.t").metadata_location == response.metadata_location


def test_concurrent_schema_changes_conflict(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    first = cat.create_table("ns.t", NESTED)
    second = cat.load_table("ns.t")
    with first.update_schema() as update:
        update.add_column(path="b", field_type=IntegerType())
    # SqlCatalog words it as pyiceberg does; RocksCatalog as Iceberg-Java does (catalog.requirements)
    pattern = "current schema id has changed: expected 0, found 1|current schema changed: expected id 0 != 1"
    with pytest.raises(CommitFailedException, match=pattern):
        with second.update_schema() as update:
            update.add_column(path="c", field_type=IntegerType())
    assert [f.name for f in cat.load_table("ns.t").schema().fields][-1] == "b"


def test_failed_schema_update_commits_nothing(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    with pytest.raises(ZeroDivisionError):
        with table.update_schema() as update:
            update.add_column(path="should_not_commit", field_type=IntegerType())
            _ = 1 / 0
    assert table.schema() == NESTED and table.schema().schema_id == 0
    reloaded = cat.load_table("ns.t")
    assert reloaded.schema() == NESTED and reloaded.metadata_location == table.metadata_location


def test_add_columns_through_the_table_and_a_transaction(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    width = len(NESTED.fields)
    table.update_schema().add_column(path="c1", field_type=IntegerType()).commit()
    assert table.schema().schema_id == 1
    with table.transaction() as tx:
        tx.update_schema().add_column(path="c2", field_type=IntegerType(), doc="doc").commit()
    schema = cat.load_table("ns.t").schema()
    assert schema.schema_id == 2
    added = schema.fields[width:]
    assert [(f.name, f.field_type, f.required, f.doc) for f in added] == [
        ("c1", IntegerType(), False, None),
        ("c2", IntegerType(), False, "doc"),
    ]
    assert schema.identifier_field_ids == NESTED.identifier_field_ids
    assert added[0].field_id > max(NESTED.field_ids)


def test_old_metadata_files_are_deleted_beyond_previous_versions_max(any_catalog: Catalog) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", NESTED)
    original = table.metadata_location
    for i in range(5):
        with table.transaction() as tx, tx.update_schema() as update:
            update.add_column(path=f"new_column_{i}", field_type=IntegerType())
    assert len(table.metadata.metadata_log) == 5
    assert file_exists(cat, original)
    with table.transaction() as tx:
        tx.set_properties(
            {
                TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "2",
                TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
            }
        )
    assert len(table.metadata.metadata_log) == 2
    older, newer = table.metadata.metadata_log
    with table.transaction() as tx, tx.update_schema() as update:
        update.add_column(path="new_column_x", field_type=IntegerType())
    assert len(table.metadata.metadata_log) == 2
    assert not file_exists(cat, original)
    assert not file_exists(cat, older.metadata_file)
    assert file_exists(cat, newer.metadata_file)


@pytest.mark.parametrize("format_version", [1, 2])
def test_schema_evolution_with_writes_in_one_transaction(any_catalog: Catalog, format_version: int) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    narrow = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string())})
    wide = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string()), "bar": pa.array([19, None, 25], pa.int32())})
    table = cat.create_table("ns.t", narrow.schema, properties={"format-version": str(format_version)})
    with table.transaction() as tx:
        with tx.update_schema() as update:
            update.union_by_name(wide.schema)
        tx.append(wide)
        tx.overwrite(wide)
        tx.delete("foo = 'a'")
    loaded = cat.load_table("ns.t")
    assert loaded.schema().as_arrow().names == ["foo", "bar"]
    assert sorted(loaded.scan().to_arrow().column("bar").to_pylist(), key=str) == [25, None]


@pytest.mark.parametrize("format_version", [1, 2])
def test_create_table_transaction_with_files_and_a_schema_change(any_catalog: Catalog, format_version: int) -> None:
    cat = any_catalog
    cat.create_namespace("ns")
    narrow = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string())})
    wide = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string()), "bar": pa.array([19, None, 25], pa.int32())})
    with cat.create_table_transaction("ns.t", narrow.schema, properties={"format-version": str(format_version)}) as tx:
        with tx.update_snapshot().fast_append() as snapshot:
            for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=narrow, io=tx._table.io):
                snapshot.append_data_file(data_file)
        with tx.update_schema() as update:
            update.union_by_name(wide.schema)
        with tx.update_snapshot().fast_append() as snapshot:
            for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=wide, io=tx._table.io):
                snapshot.append_data_file(data_file)
    table = cat.load_table("ns.t")
    assert table.format_version == format_version
    assert len(table.scan().to_arrow()) == 6
