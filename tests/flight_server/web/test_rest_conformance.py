"""The REST catalog answers as Iceberg-Java's RESTCatalog and CatalogTests expect: error types,
statuses and wording, and REPLACE transactions racing with different sort orders / specs /
schemas (the second gets fresh ids, never a 400)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.flight_server.web.rest_support import rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("conf") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> RestCatalog:
    cat = RestCatalog("icefloe", uri=rest_url(server))
    cat.create_namespace("conf")
    return cat


def _table_url(server: ServerProcess, name: str) -> str:
    return f"{rest_url(server)}/v1/namespaces/conf/tables/{name}"


def _error(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    assert error["code"] == response.status_code
    return response.status_code, error["type"], error["message"]


def test_already_exists_is_409_in_iceberg_javas_words(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_table("conf.dup", SCHEMA)
    with pytest.raises(TableAlreadyExistsError, match="Table already exists: conf.dup"):
        rest.create_table("conf.dup", SCHEMA)
    with pytest.raises(NamespaceAlreadyExistsError, match="Namespace already exists: conf"):
        rest.create_namespace("conf")
    staged = httpx.post(f"{rest_url(server)}/v1/namespaces/conf/tables", timeout=10, json={
        "name": "dup", "schema": SCHEMA.model_dump(by_alias=True), "stage-create": True})
    assert _error(staged) == (409, "AlreadyExistsException", "Table already exists: conf.dup")
    missing = httpx.get(_table_url(server, "nothing"), timeout=10)
    assert _error(missing) == (404, "NoSuchTableException", "Table does not exist: conf.nothing")


def _commit(server: ServerProcess, name: str, requirements: list[dict[str, Any]],
            updates: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(_table_url(server, name), json={"requirements": requirements, "updates": updates}, timeout=30)


def test_stale_requirements_are_409_in_iceberg_javas_words(rest: RestCatalog, server: ServerProcess) -> None:
    table = rest.create_table("conf.stale", SCHEMA)
    with table.update_schema() as update:
        update.add_column("extra", LongType())
    cases = [
        ({"type": "assert-current-schema-id", "current-schema-id": 0},
         "Requirement failed: current schema changed: expected id 0 != 1"),
        ({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2},
         "Requirement failed: last assigned field id changed: expected id 2 != 3"),
        ({"type": "assert-default-spec-id", "default-spec-id": 9},
         "Requirement failed: default partition spec changed: expected id 9 != 0"),
        ({"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000001"},
         f"Requirement failed: UUID does not match: expected {table.metadata.table_uuid} != "
         "00000000-0000-0000-0000-000000000001"),
        ({"type": "assert-create"}, "Requirement failed: table already exists"),
    ]
    for requirement, message in cases:
        answer = _commit(server, "stale", [requirement], [{"action": "set-properties", "updates": {"k": "v"}}])
        assert _error(answer) == (409, "CommitFailedException", message)
    # pyiceberg's RestCatalog maps it to its CommitFailedException, with the message
    stale = rest.load_table("conf.stale")
    with table.update_schema() as update:
        update.add_column("more", LongType())
    with pytest.raises(CommitFailedException, match="current schema changed: expected id 1 != 2"):
        with stale.update_schema() as update:
            update.add_column("late", LongType())


def _replace(uuid: str, order_field: int, spec_field: int, schema_fields: list[dict[str, Any]]) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """A REPLACE transaction as Iceberg-Java's client sends it, numbered from the table as it
    was created (schema 0, spec 0, unsorted order 0)."""
    return [{"type": "assert-table-uuid", "uuid": uuid}], [
        {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": schema_fields},
         "last-column-id": 3},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 1, "fields": [
            {"source-id": spec_field, "field-id": 1000, "name": f"p{spec_field}", "transform": "identity"}]}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [
            {"source-id": order_field, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}]}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
    ]


def test_racing_replace_transactions_get_fresh_ids(rest: RestCatalog, server: ServerProcess) -> None:
    table = rest.create_table("conf.race", SCHEMA)
    uuid = str(table.metadata.table_uuid)
    fields = [{"id": 1, "name": "id", "type": "long", "required": False},
              {"id": 2, "name": "name", "type": "string", "required": False}]
    first = _commit(server, "race", *_replace(uuid, 1, 1, [*fields, {"id": 3, "name": "a", "type": "long",
                                                                      "required": False}]))
    assert first.status_code == 200, first.text
    second = _commit(server, "race", *_replace(uuid, 2, 2, [*fields, {"id": 3, "name": "b", "type": "string",
                                                                       "required": False}]))
    assert second.status_code == 200, second.text
    metadata = rest.load_table("conf.race").metadata
    assert [o.order_id for o in metadata.sort_orders] == [0, 1, 2]
    assert metadata.default_sort_order_id == 2 and metadata.sort_order().fields[0].source_id == 2
    assert [s.spec_id for s in metadata.partition_specs] == [0, 1, 2]
    assert metadata.default_spec_id == 2 and metadata.spec().fields[0].source_id == 2
    assert [s.schema_id for s in metadata.schemas] == [0, 1, 2]
    assert metadata.current_schema_id == 2 and metadata.schema().find_field("b").field_type == StringType()


def test_load_of_a_table_whose_metadata_file_is_gone_is_404_before_and_after_restart(tmp_path: Path) -> None:
    with rest_server(tmp_path / "wh") as server:
        cat = RestCatalog("icefloe", uri=rest_url(server))
        cat.create_namespace("gone")
        location = cat.create_table("gone.t", SCHEMA).metadata_location
        cat.load_table("gone.t")
        os.remove(location.removeprefix("file://"))
        url = f"{rest_url(server)}/v1/namespaces/gone/tables/t"
        expected = (404, "NotFoundException", f"Failed to open input stream for file: {location}")
        assert _error(httpx.get(url, timeout=10)) == expected
        server.log_lines.clear()  # rest_url reads the newest server's address
        server.restart()
        url = f"{rest_url(server)}/v1/namespaces/gone/tables/t"
        assert _error(httpx.get(url, timeout=10)) == expected
        with pytest.raises(NoSuchTableError, match="Failed to open input stream"):
            RestCatalog("icefloe", uri=rest_url(server)).load_table("gone.t")
        assert httpx.head(url, timeout=10).status_code == 204  # still listed
        assert httpx.delete(url, timeout=10).status_code == 204  # and can be dropped
        assert httpx.head(url, timeout=10).status_code == 404


@pytest.mark.parametrize("start", [1, 2])
def test_upgrade_to_format_v3_is_served(rest: RestCatalog, server: ServerProcess, start: int) -> None:
    # Iceberg-Java's create transaction of a v3 table stages a create and commits
    # `upgrade-format-version` 3 (CatalogTests.createTableTransaction); pyiceberg's own
    # update refuses versions above 2.
    name = f"up{start}"
    rest.create_table(f"conf.{name}", SCHEMA, properties={"format-version": str(start)})
    answer = _commit(server, name, [], [{"action": "upgrade-format-version", "format-version": 3}])
    assert answer.status_code == 200, answer.text
    loaded = httpx.get(_table_url(server, name), timeout=10).json()["metadata"]
    assert loaded["format-version"] == 3 and loaded["next-row-id"] == 0
    assert rest.load_table(f"conf.{name}").metadata.format_version == 3
    # Above 3 is still a 400, and nothing changed.
    beyond = _commit(server, name, [], [{"action": "upgrade-format-version", "format-version": 4}])
    assert beyond.status_code == 400
    assert httpx.get(_table_url(server, name), timeout=10).json()["metadata"]["format-version"] == 3
