"""RocksCatalog behaviour with no SqlCatalog counterpart, or where we deliberately differ.

- Views: SqlCatalog raises NotImplementedError from every view call; we answer the read
  calls (no views exist) and refuse the writes with a clear message.
- register_table(overwrite=True): SqlCatalog does not support it.
- drop_namespace with child namespaces: SqlCatalog drops the parent's properties and keeps
  the children reachable (the parent then still "exists" through them); we refuse with
  NamespaceNotEmptyError so that a drop never leaves orphaned children.
- Namespace levels with leading or trailing whitespace (" a"): SqlCatalog strips them and
  stores "a"; we refuse them with InvalidNameError (test_bad_input.py). Empty and
  whitespace-only levels are NoSuchNamespaceError on both (test_behaviour_namespaces.py).
- Namespace properties that are not text ({None: "v"}, {"k": None}): SqlCatalog fails with
  its database's IntegrityError; we raise a ValueError naming the key (test_bad_input.py).
- load_namespace_properties: SqlCatalog adds {"exists": "true"} to every namespace; we return
  only what was set.
- The commit log and reopening are ours alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalog_testlib import SCHEMA, ids, missing_files, rows
from pyiceberg.exceptions import NamespaceNotEmptyError, NoSuchViewError, TableAlreadyExistsError

from catalog import RocksCatalog, commit_context
from catalog.sandbox import TableLocationTakenError


def test_missing_views_answer_clearly(rocks: RocksCatalog) -> None:
    # Views are served (catalog.views); what is not there says so, and register is refused.
    rocks.create_namespace("ns")
    assert rocks.list_views("ns") == []
    assert not rocks.view_exists("ns.v")
    with pytest.raises(NoSuchViewError, match="View does not exist: ns.v"):
        rocks.load_view("ns.v")
    with pytest.raises(NoSuchViewError, match="View does not exist: ns.v"):
        rocks.drop_view("ns.v")
    with pytest.raises(NotImplementedError, match="registering views is not supported"):
        rocks.register_view("ns.v", "/tmp/x.metadata.json")


def test_drop_namespace_with_children_refused(rocks: RocksCatalog) -> None:
    rocks.create_namespace(("a",))
    rocks.create_namespace(("a", "b"))
    with pytest.raises(NamespaceNotEmptyError, match="child namespaces"):
        rocks.drop_namespace("a")
    assert rocks.namespace_exists(("a", "b"))
    rocks.drop_namespace(("a", "b"))
    rocks.drop_namespace("a")
    assert rocks.list_namespaces() == []


def test_register_table_overwrite(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    first = rocks.create_table("ns.first", SCHEMA)
    first.append(rows(0, 2))
    second = rocks.create_table("ns.second", SCHEMA)
    second.append(rows(100, 1))
    first_location = rocks.load_table("ns.first").metadata_location
    with pytest.raises(TableAlreadyExistsError):
        rocks.register_table("ns.second", first_location)
    # Two tables never share a folder (catalog.sandbox): the first must be dropped first.
    with pytest.raises(TableLocationTakenError, match="ns.first"):
        rocks.register_table("ns.second", first_location, overwrite=True)
    rocks.drop_table("ns.first")
    rocks.register_table("ns.second", first_location, overwrite=True)
    assert ids(rocks.load_table("ns.second")) == [0, 1]


def test_reopen_reads_metadata_from_files(tmp_path: Path) -> None:
    """A fresh catalog has no metadata cache: every load parses the metadata file."""
    warehouse = str(tmp_path / "wh")
    cat = RocksCatalog("a", warehouse=warehouse)
    cat.create_namespace(("org", "eu"), {"k": "v"})
    table = cat.create_table("org.eu.t", SCHEMA)
    table.append(rows(0, 3))
    cat.close()
    reopened = RocksCatalog("b", warehouse=warehouse)
    try:
        loaded = reopened.load_table("org.eu.t")
        assert ids(loaded) == [0, 1, 2]
        assert missing_files(loaded) == []
        assert reopened.load_namespace_properties("org.eu") == {"k": "v"}
        loaded.append(rows(3, 1))
        assert ids(reopened.load_table("org.eu.t")) == [0, 1, 2, 3]
        assert reopened.log.head() == 3
    finally:
        reopened.close()


def test_commit_log_records_every_table_change(rocks: RocksCatalog) -> None:
    rocks.create_namespace("ns")
    rocks.create_namespace("other")
    table = rocks.create_table("ns.t", SCHEMA)
    with commit_context(principal="ana", extra={"request": "r1"}):
        table.append(rows(0, 5))
    table.delete("id < 2")  # copy-on-write: rewrites the one data file, an "overwrite"
    with table.update_schema() as update:
        update.rename_column("name", "label")
    rocks.rename_table("ns.t", "other.u")
    location = rocks.load_table("other.u").metadata_location
    rocks.drop_table("other.u")
    rocks.register_table("ns.copy", location)
    records = list(rocks.log.read(0))
    assert [r.seq for r in records] == list(range(1, 8))
    assert [r.operation for r in records] == ["create", "append", "overwrite", "schema", "rename", "drop", "register"]
    create, append, overwrite = records[0], records[1], records[2]
    assert create.qualified_name == "ns.t" and create.snapshot_id is None
    assert append.added_rows == 5 and append.added_files == 1 and append.principal == "ana"
    assert append.extra == {"request": "r1"}
    # The 3 surviving rows are carried over, not added (issue 38): 2 rows deleted, none added.
    assert (overwrite.deleted_rows, overwrite.added_rows, overwrite.removed_files) == (2, 0, 1)
    assert overwrite.parent_snapshot_id == append.snapshot_id
    assert records[4].qualified_name == "other.u" and records[4].extra["renamed_from"] == "ns.t"
    assert {r.table_uuid for r in records[:5]} == {str(table.metadata.table_uuid)}
    assert rocks.log.head() == 7 and rocks.log.log_start() == 1
    # Namespace changes are not table commits and do not move the sequence.
    rocks.create_namespace("third")
    rocks.update_namespace_properties("third", updates={"x": "y"})
    assert rocks.log.head() == 7
