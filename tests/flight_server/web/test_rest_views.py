"""Iceberg views over the REST catalog: pyiceberg's RestCatalog (create, load, list, exists,
drop) and raw HTTP for what pyiceberg 0.12 does not send (replace, rename); every change on
the commit log; /v1/config names the view endpoints; view files stay in the view's folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError, TableAlreadyExistsError, ViewAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import ViewVersion

from tests.flight_server.web.rest_support import commit_records, rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def _version(sql: str, dialect: str = "spark") -> ViewVersion:
    return ViewVersion(**{  # type: ignore[arg-type]
        "version-id": 1, "schema-id": 0, "timestamp-ms": 1_700_000_000_000,
        "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": sql, "dialect": dialect}],
        "default-namespace": ["vw"],
    })


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("views") / "wh") as proc:
        yield proc


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> RestCatalog:
    cat = RestCatalog("icefloe", uri=rest_url(server))
    cat.create_namespace("vw")
    cat.create_table("vw.base", SCHEMA)
    return cat


def _url(server: ServerProcess, path: str) -> str:
    return f"{rest_url(server)}/v1/{path}"


def test_config_names_the_view_endpoints(server: ServerProcess) -> None:
    endpoints = set(httpx.get(_url(server, "config"), timeout=10).json()["endpoints"])
    assert {
        "GET /v1/{prefix}/namespaces/{namespace}/views",
        "POST /v1/{prefix}/namespaces/{namespace}/views",
        "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/views/rename",
    } <= endpoints


def test_create_load_list_exists_drop_with_pyiceberg(rest: RestCatalog, server: ServerProcess) -> None:
    before = commit_records(server.warehouse)[-1].seq
    view = rest.create_view("vw.v1", SCHEMA, _version("SELECT id, name FROM vw.base"), properties={"k": "v"})
    assert view.metadata.current_version_id == 1 and view.properties == {"k": "v"}
    assert view.current_version().representations[0].root.sql == "SELECT id, name FROM vw.base"
    assert view.location().startswith(f"file://{server.warehouse.resolve()}/")
    loaded = rest.load_view("vw.v1")
    assert loaded.metadata == view.metadata and loaded.schema() == SCHEMA
    assert rest.list_views("vw") == [("vw", "v1")]
    assert rest.view_exists("vw.v1") and not rest.view_exists("vw.nothing")
    assert rest.list_tables("vw") == [("vw", "base")]  # views are not tables
    with pytest.raises(ViewAlreadyExistsError, match="View already exists: vw.v1"):
        rest.create_view("vw.v1", SCHEMA, _version("SELECT 1"))
    with pytest.raises((ViewAlreadyExistsError, TableAlreadyExistsError), match="Table with same name already exists"):
        rest.create_view("vw.base", SCHEMA, _version("SELECT 1"))
    with pytest.raises(TableAlreadyExistsError, match="View with same name already exists: vw.v1"):
        rest.create_table("vw.v1", SCHEMA)
    rest.drop_view("vw.v1")
    assert not rest.view_exists("vw.v1") and rest.list_views("vw") == []
    with pytest.raises(NoSuchViewError, match="View does not exist: vw.v1"):
        rest.load_view("vw.v1")
    with pytest.raises(NoSuchViewError):
        rest.drop_view("vw.v1")
    records = [r for r in commit_records(server.warehouse, before) if r.table == "v1"]
    assert [r.operation for r in records] == ["view-create", "view-drop"]


def _replace_body(uuid: str, sql: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """A REPLACE VIEW as Iceberg-Java's client sends it."""
    return {
        "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": fields}},
            {"action": "add-view-version", "view-version": {
                "version-id": 2, "schema-id": -1, "timestamp-ms": 1_700_000_001_000, "summary": {},
                "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
                "default-namespace": ["vw"]}},
            {"action": "set-current-view-version", "view-version-id": -1},
            {"action": "set-properties", "updates": {"comment": "replaced"}},
        ],
    }


def test_replace_adds_a_version_and_rename_moves_the_view(rest: RestCatalog, server: ServerProcess) -> None:
    view = rest.create_view("vw.v2", SCHEMA, _version("SELECT id, name FROM vw.base"))
    url = _url(server, "namespaces/vw/views/v2")
    answer = httpx.post(url, json=_replace_body(str(view.metadata.view_uuid), "SELECT id FROM vw.base",
                                                [{"id": 1, "name": "id", "type": "long", "required": False}]),
                        timeout=10)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    metadata = body["metadata"]
    assert metadata["current-version-id"] == 2 and [v["version-id"] for v in metadata["versions"]] == [1, 2]
    assert metadata["versions"][1]["schema-id"] == 1 and len(metadata["schemas"]) == 2
    assert [e["version-id"] for e in metadata["version-log"]] == [1, 2]
    assert metadata["properties"] == {"comment": "replaced"}
    assert body["metadata-location"].split("/")[-1].startswith("00001-")
    loaded = rest.load_view("vw.v2")
    assert loaded.current_version().representations[0].root.sql == "SELECT id FROM vw.base"
    assert [f.name for f in loaded.schema().fields] == ["id"]
    # A stale UUID is a 409 in Java's words; an unknown action is a 400; nothing lands.
    stale = httpx.post(url, json={"requirements": [{"type": "assert-view-uuid", "uuid": "x"}], "updates": []},
                       timeout=10)
    assert stale.status_code == 409 and stale.json()["error"]["type"] == "CommitFailedException"
    assert stale.json()["error"]["message"].startswith("Requirement failed: view UUID does not match")
    odd = httpx.post(url, json={"updates": [{"action": "explode"}]}, timeout=10)
    assert odd.status_code == 400 and "unsupported view update action" in odd.json()["error"]["message"]
    outside = httpx.post(url, json={"updates": [{"action": "set-location", "location": "/etc"}]}, timeout=10)
    assert outside.status_code == 400
    renamed = httpx.post(_url(server, "views/rename"), timeout=10, json={
        "source": {"namespace": ["vw"], "name": "v2"}, "destination": {"namespace": ["vw"], "name": "v3"}})
    assert renamed.status_code == 204, renamed.text
    assert rest.list_views("vw") == [("vw", "v3")] and rest.load_view("vw.v3").metadata == loaded.metadata
    missing = httpx.post(_url(server, "views/rename"), timeout=10, json={
        "source": {"namespace": ["vw"], "name": "v2"}, "destination": {"namespace": ["vw"], "name": "v4"}})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NoSuchViewException"
    operations = [r.operation for r in commit_records(server.warehouse) if r.table in ("v2", "v3")]
    assert operations == ["view-create", "view-replace", "view-rename"]
    # A namespace holding a view is not empty.
    assert httpx.delete(_url(server, "namespaces/vw"), timeout=10).status_code == 409
    rest.drop_view("vw.v3")


@pytest.mark.parametrize("body", [
    {"name": "x", "schema": {"type": "struct", "fields": []}, "view-version": 5},
    {"name": "x", "schema": 5, "view-version": {}},
    {"name": "x", "schema": {"type": "struct", "fields": []}, "view-version": {"representations": "no"}},
    {"name": "x", "location": "/etc/elsewhere", "schema": {"type": "struct", "fields": []},
     "view-version": {"version-id": 1, "schema-id": 0, "representations": [], "default-namespace": []}},
    {"name": ["x"]},
])
def test_bad_create_bodies_are_400(server: ServerProcess, rest: RestCatalog, body: dict[str, Any]) -> None:
    answer = httpx.post(_url(server, "namespaces/vw/views"), json=body, timeout=10)
    assert answer.status_code == 400, answer.text


def test_view_files_live_in_the_views_own_folder(rest: RestCatalog, server: ServerProcess, tmp_path: Path) -> None:
    view = rest.create_view("vw.files", SCHEMA, _version("SELECT 1"))
    folder = Path(view.location().removeprefix("file://"))
    assert folder.parent == server.warehouse.resolve() / "vw"
    assert [p.name.split("-")[0] for p in (folder / "metadata").iterdir()] == ["00000"]
    base = rest.load_table("vw.base").location()
    inside_table = httpx.post(_url(server, "namespaces/vw/views"), timeout=10, json={
        "name": "nested", "location": f"{base}/sub", "schema": SCHEMA.model_dump(by_alias=True),
        "view-version": _version("SELECT 1").model_dump(by_alias=True)})
    assert inside_table.status_code == 400 and "overlaps the folder of table vw.base" in inside_table.text
    rest.drop_view("vw.files")


def test_register_view_serves_an_existing_metadata_file(rest: RestCatalog, server: ServerProcess) -> None:
    view = rest.create_view("vw.reg", SCHEMA, _version("SELECT id, name FROM vw.base"))
    loaded = httpx.get(_url(server, "namespaces/vw/views/reg"), timeout=10).json()
    location = loaded["metadata-location"]
    rest.drop_view("vw.reg")  # its files stay
    url = _url(server, "namespaces/vw/register-view")
    answer = httpx.post(url, json={"name": "reg", "metadata-location": location}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata-location"] == location
    assert answer.json()["metadata"] == loaded["metadata"]
    assert rest.load_view("vw.reg").metadata.view_uuid == view.metadata.view_uuid
    # Java's words for a taken name, a view's or a table's: 409, nothing lands.
    again = httpx.post(url, json={"name": "reg", "metadata-location": location}, timeout=10)
    assert again.status_code == 409 and again.json()["error"] == {
        "message": "View already exists: vw.reg", "type": "AlreadyExistsException", "code": 409}
    as_table = httpx.post(url, json={"name": "base", "metadata-location": location}, timeout=10)
    assert as_table.status_code == 409
    assert as_table.json()["error"]["message"] == "Table with same name already exists: vw.base"
    ops = [r.operation for r in commit_records(server.warehouse) if r.table == "reg"]
    assert ops == ["view-create", "view-drop", "view-register"]
    rest.drop_view("vw.reg")


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"name": "r2", "metadata-location": "/etc/passwd"}, 400, "must lie inside the catalog's warehouse"),
    ({"name": "r2", "metadata-location": 7}, 400, "metadata-location must be a string"),
    ({"name": "r2"}, 400, "metadata-location must be a string"),
    ({"name": "r2", "metadata-location": "WH/vw/nothing/metadata/00000-x.metadata.json"}, 400, "cannot be read"),
    ({"name": "r2", "metadata-location": "TABLE_METADATA"}, 400, "is not an Iceberg view metadata JSON file"),
    ({"name": "a.b", "metadata-location": "WH/x"}, 400, "must not contain '.'"),
])
def test_bad_register_view_bodies(server: ServerProcess, rest: RestCatalog, body: dict[str, Any], status: int,
                                  words: str) -> None:
    location = body.get("metadata-location")
    if location == "TABLE_METADATA":  # a table's metadata file is no view's
        body["metadata-location"] = httpx.get(_url(server, "namespaces/vw/tables/base"), timeout=10).json()[
            "metadata-location"]
    elif isinstance(location, str) and location.startswith("WH/"):
        body["metadata-location"] = f"{server.warehouse}/{location[3:]}"
    before = len(commit_records(server.warehouse))
    answer = httpx.post(_url(server, "namespaces/vw/register-view"), json=body, timeout=10)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]["message"]
    assert len(commit_records(server.warehouse)) == before
    assert not rest.view_exists("vw.r2")


def test_register_view_is_in_the_config_endpoints(server: ServerProcess) -> None:
    endpoints = httpx.get(_url(server, "config"), timeout=10).json()["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/register-view" in endpoints


def test_a_view_whose_metadata_file_is_gone_is_404(rest: RestCatalog, server: ServerProcess) -> None:
    rest.create_view("vw.lost", SCHEMA, _version("SELECT id FROM vw.base"))
    url = _url(server, "namespaces/vw/views/lost")
    location = httpx.get(url, timeout=10).json()["metadata-location"]  # parsed and cached now
    Path(location.removeprefix("file://")).unlink()
    answer = httpx.get(url, timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["type"] == "NotFoundException", answer.text
    rest.drop_view("vw.lost")
