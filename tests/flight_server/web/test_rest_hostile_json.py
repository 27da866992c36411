"""Hostile JSON to every REST route never gets a 5xx: each body field of each route (found from
the router itself), replaced by every wrong JSON type, gets a 4xx in the spec's error model;
and the cases found that way, each pinned by its own test: non-metadata files given to
``register``, non-string property values, format version 3, unhashable update actions and
requirement types, model validators tripping over missing fields, unparsable Iceberg types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.view.metadata import ViewVersion

from catalog import RocksCatalog
from flight_server.http.rest.auth import RestAuth
from flight_server.http.rest.routes import RestCatalogApp
from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64())])
SCHEMA_JSON = {"type": "struct", "schema-id": 0,
               "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
SPEC = {"spec-id": 0, "fields": [{"source-id": 1, "field-id": 1000, "transform": "bucket[4]", "name": "b"}]}
ORDER = {"order-id": 1, "fields": [{"source-id": 1, "transform": "identity", "direction": "asc",
                                    "null-order": "nulls-first"}]}
# Every JSON type, plus strings pyiceberg parses as types and transforms.
WRONG: list[Any] = [None, 1, -(2**63), 1.5, True, "s", [], {}, [1], {"a": 1}]
WRONG_STRINGS = ["bucket[x]", "bucket[-1]", "truncate[0]", "decimal(99,2)", "fixed[-1]", "zzz"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("hostile") / "wh") as proc:
        rest = RestCatalog("r", uri=rest_url(proc))
        rest.create_namespace("ns")
        rest.create_table("ns.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rest_url(server), timeout=30) as http:
        yield http


def expect(answer: httpx.Response, status: int, fragment: str = "") -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == status and error["type"] == "BadRequestException", error
    assert fragment.lower() in error["message"].lower(), error
    assert "Traceback" not in answer.text and "/tmp/" not in answer.text


def routes(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(method, pattern) of every route the REST router serves, from the router itself (built
    over a throwaway catalog in ``folder``)."""
    catalog = RocksCatalog("routes", warehouse=str(folder / "wh"))
    try:
        return [(e.method, e.pattern) for e in RestCatalogApp(catalog, RestAuth(None, 60.0)).endpoints]
    finally:
        catalog.close()


# -- the sweep ----------------------------------------------------------------------------


def _mutations(value: Any) -> Iterator[Any]:
    """``value`` with one field (at any depth) replaced by a wrong value, or deleted."""
    if isinstance(value, dict):
        for key, inner in value.items():
            wrong = WRONG + (WRONG_STRINGS if key in ("type", "transform") else [])
            for replacement in [*wrong, *_mutations(inner)]:
                yield {**value, key: replacement}
            yield {k: v for k, v in value.items() if k != key}
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            for replacement in [*WRONG, *_mutations(inner)]:
                yield [*value[:index], replacement, *value[index + 1:]]


def _bodies(client: httpx.Client) -> dict[tuple[str, tuple[str, ...]], tuple[str, list[dict[str, Any]]]]:
    """A valid body of each route that takes one, and the path to send it to."""
    loaded = client.get("/v1/namespaces/ns/tables/t").json()
    metadata = loaded["metadata"]
    uuid, snapshot = metadata["table-uuid"], metadata["snapshots"][0]
    guard = [{"type": "assert-table-uuid", "uuid": uuid}]
    updates = [
        {"action": "assign-uuid", "uuid": uuid},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": {**SCHEMA_JSON, "schema-id": 1}, "last-column-id": 1},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": SPEC},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": ORDER},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "b1", "type": "branch", "snapshot-id": snapshot["snapshot-id"]},
        {"action": "remove-snapshot-ref", "ref-name": "nope"},
        {"action": "set-properties", "updates": {"a": "b"}},
        {"action": "remove-properties", "removals": ["a"]},
        {"action": "set-statistics", "snapshot-id": snapshot["snapshot-id"], "statistics": {
            "snapshot-id": snapshot["snapshot-id"], "statistics-path": metadata["location"] + "/metadata/s.puffin",
            "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1, "blob-metadata": []}},
        {"action": "remove-statistics", "snapshot-id": 1},
    ]
    requirements = [
        {"type": "assert-create"}, {"type": "assert-table-uuid", "uuid": uuid},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot["snapshot-id"]},
        {"type": "assert-current-schema-id", "current-schema-id": 0},
        {"type": "assert-default-spec-id", "default-spec-id": 0},
    ]
    table = ("namespaces", "{namespace}", "tables", "{table}")
    loaded_view = client.get("/v1/namespaces/ns/views/v").json()
    view = loaded_view["metadata"]
    view_version = {"version-id": 1, "schema-id": 0, "timestamp-ms": 1, "summary": {"engine-name": "x"},
                    "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
                    "default-namespace": ["ns"]}
    view_updates = [
        {"action": "assign-uuid", "uuid": view["view-uuid"]},
        {"action": "upgrade-format-version", "format-version": 1},
        {"action": "add-schema", "schema": {**SCHEMA_JSON, "schema-id": 1}, "last-column-id": 1},
        {"action": "set-location", "location": view["location"]},
        {"action": "set-properties", "updates": {"a": "b"}},
        {"action": "remove-properties", "removals": ["a"]},
        {"action": "add-view-version", "view-version": {**view_version, "version-id": 2}},
        {"action": "set-current-view-version", "view-version-id": 1},
    ]
    return {
        ("POST", ("namespaces", "{namespace}", "views")): ("/v1/namespaces/ns/views", [{
            "name": "vcreated", "schema": SCHEMA_JSON, "view-version": view_version, "properties": {"a": "b"}}]),
        ("POST", ("namespaces", "{namespace}", "views", "{view}")): ("/v1/namespaces/ns/views/v", [
            {"identifier": {"namespace": ["ns"], "name": "v"},
             "requirements": [{"type": "assert-view-uuid", "uuid": view["view-uuid"]}], "updates": [u]}
            for u in view_updates]),
        ("POST", ("namespaces", "{namespace}", "register-view")): ("/v1/namespaces/ns/register-view", [{
            "name": "vregistered", "metadata-location": loaded_view["metadata-location"]}]),
        ("POST", ("views", "rename")): ("/v1/views/rename", [{
            "source": {"namespace": ["ns"], "name": "nope"}, "destination": {"namespace": ["ns"], "name": "nope2"}}]),
        ("POST", ("namespaces",)): ("/v1/namespaces", [{"namespace": ["nx"], "properties": {"a": "b"}}]),
        ("POST", ("namespaces", "{namespace}", "properties")): (
            "/v1/namespaces/ns/properties", [{"removals": ["a"], "updates": {"b": "c"}}]),
        ("POST", ("namespaces", "{namespace}", "tables")): ("/v1/namespaces/ns/tables", [{
            "name": "created", "schema": SCHEMA_JSON, "partition-spec": SPEC, "write-order": ORDER,
            "properties": {"a": "b"}, "stage-create": True}]),
        ("POST", ("namespaces", "{namespace}", "register")): ("/v1/namespaces/ns/register", [{
            "name": "registered", "metadata-location": loaded["metadata-location"], "overwrite": False}]),
        ("POST", table): ("/v1/namespaces/ns/tables/t", [
            *({"identifier": {"namespace": ["ns"], "name": "t"}, "requirements": guard, "updates": [u]}
              for u in updates),
            *({"requirements": [r], "updates": []} for r in requirements)]),
        ("POST", (*table, "metrics")): ("/v1/namespaces/ns/tables/t/metrics", [{"report-type": "scan-report"}]),
        ("POST", ("tables", "rename")): ("/v1/tables/rename", [{
            "source": {"namespace": ["ns"], "name": "nope"}, "destination": {"namespace": ["ns"], "name": "nope2"}}]),
        ("POST", ("transactions", "commit")): ("/v1/transactions/commit", [{"table-changes": [{
            "identifier": {"namespace": ["ns"], "name": "t"},
            "requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
            "updates": [{"action": "set-properties", "updates": {"a": "b"}}]}]}]),
    }


def test_every_field_of_every_route_with_every_wrong_type_is_a_4xx(tmp_path: Path) -> None:
    # Its own server: some mutations are valid requests and create namespaces and tables.
    limits = httpx.Limits(max_connections=8)
    with rest_server(tmp_path / "sweep") as server, \
            httpx.Client(base_url=rest_url(server), timeout=30, limits=limits) as client:
        rest = RestCatalog("r", uri=rest_url(server))
        rest.create_namespace("ns")
        rest.create_table("ns.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
        rest.create_view("ns.v", SCHEMA, ViewVersion(**{  # type: ignore[arg-type]
            "version-id": 1, "schema-id": 0, "default-namespace": ["ns"],
            "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}]}))
        _sweep(server, client, tmp_path)


def _sweep(server: ServerProcess, client: httpx.Client, tmp_path: Path) -> None:
    bodies = _bodies(client)
    served = routes(tmp_path)
    # A route with a JSON body missing here fails: add a valid body of it above.
    takes_body = {route for route in served if route[0] == "POST" and route[1] != ("oauth", "tokens")}
    assert takes_body == set(bodies), takes_body ^ set(bodies)
    items = [("POST", path, json.dumps(mutated).encode())
             for path, valid in bodies.values() for body in valid for mutated in _mutations(body)]
    # Every route without a JSON body: hostile query strings.
    queries = ["pageSize=0", "pageSize=x", "pageToken=zz", "pageToken=W10=", "pageToken=WzEsMl0=", "parent=%1F",
               "snapshots=x", "purgeRequested=maybe", "warehouse=%00", "warehouse=s3://x"]
    for method, pattern in served:
        if (method, pattern) not in bodies:
            path = "/v1/" + "/".join(pattern).replace("{namespace}", "ns").replace("{table}", "nope") \
                .replace("{view}", "nope")
            items += [(method, f"{path}?{query}", b"") for query in queries]

    def send(item: tuple[str, str, bytes]) -> tuple[str, str, bytes, int, str]:
        method, path, body = item
        answer = client.request(method, path, content=body or None)  # httpx.Client is thread-safe
        return method, path, body[:300], answer.status_code, answer.text[:300]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, items))
    assert len(answers) > 2000, len(answers)
    failures = [answer for answer in answers if answer[3] >= 500]
    assert not failures, failures[:10]
    assert client.get("/v1/config").status_code == 200


# -- each case found, pinned ------------------------------------------------------------------


@pytest.fixture
def nothing_committed(server: ServerProcess) -> Iterator[None]:
    before = head_seq(server.warehouse)
    yield
    assert head_seq(server.warehouse) == before, "bad input must commit nothing"


@pytest.mark.usefixtures("nothing_committed")
def test_register_takes_only_iceberg_metadata_json(server: ServerProcess, client: httpx.Client) -> None:
    loaded = client.get("/v1/namespaces/ns/tables/t").json()
    folder = Path(loaded["metadata"]["location"].removeprefix("file://")) / "metadata"
    data_file = next((folder.parent / "data").rglob("*.parquet"))
    (folder / "object.json").write_text("{}")
    (folder / "text.metadata.json").write_text("not json at all")
    (folder / "list.metadata.json").write_text("[1, 2]")
    v3 = json.loads(Path(loaded["metadata-location"].removeprefix("file://")).read_text())
    v3["format-version"] = 3
    (folder / "v3.metadata.json").write_text(json.dumps(v3))
    cases = [
        (str(data_file), "not an Iceberg table metadata JSON file"),  # binary: was the codec's message
        (str(folder / "object.json"), "not an Iceberg table metadata JSON file"),  # was a 500
        (str(folder / "text.metadata.json"), "not an Iceberg table metadata JSON file"),  # was a 500
        (str(folder / "list.metadata.json"), "not an Iceberg table metadata JSON file"),  # was a 500
        (str(folder / "missing.metadata.json"), "cannot be read"),
        (str(folder), "cannot be read"),  # a folder
    ]
    for index, (location, fragment) in enumerate(cases):
        answer = client.post("/v1/namespaces/ns/register", json={"name": f"r{index}", "metadata-location": location})
        expect(answer, 400, fragment)
    assert client.get("/v1/namespaces/ns/tables").json()["identifiers"] == [{"namespace": ["ns"], "name": "t"}]


@pytest.mark.usefixtures("nothing_committed")
@pytest.mark.parametrize("value", [{"a": 1}, ["x"], 1, True, None])
def test_property_values_must_be_strings_everywhere(client: httpx.Client, value: Any) -> None:
    expect(client.post("/v1/namespaces", json={"namespace": ["n2"], "properties": {"k": value}}), 400, "string")
    expect(client.post("/v1/namespaces/ns/properties", json={"updates": {"k": value}}), 400, "string")
    create = {"name": "x", "schema": SCHEMA_JSON, "properties": {"k": value}}
    expect(client.post("/v1/namespaces/ns/tables", json=create), 400, "string")
    expect(client.post("/v1/namespaces/ns/tables", json={**create, "stage-create": True}), 400, "string")
    # A commit: pyiceberg's model would have turned 1 / true / {"a": 1} into text (committed, 200).
    update = {"action": "set-properties", "updates": {"k": value}}
    expect(client.post("/v1/namespaces/ns/tables/t", json={"updates": [update]}), 400, "values must be strings")
    change = {"identifier": {"namespace": ["ns"], "name": "t"}, "requirements": [], "updates": [update]}
    expect(client.post("/v1/transactions/commit", json={"table-changes": [change]}), 400, "values must be strings")
    assert "k" not in client.get("/v1/namespaces/ns/tables/t").json()["metadata"]["properties"]


@pytest.mark.usefixtures("nothing_committed")
def test_unknown_format_versions_are_refused(client: httpx.Client) -> None:
    for index, (body, fragment) in enumerate([
        ({"properties": {"format-version": "9"}}, "format-version must be 1, 2 or 3, got '9'"),  # was a 500
        ({"properties": {"format-version": "9"}, "stage-create": True}, "got '9'"),  # was a 500
        ({"properties": {"format-version": "x"}}, "got 'x'"),  # was int()'s message
        ({"format-version": 4}, "format-version must be 1, 2 or 3, got 4"),  # was silently a v2 table
        ({"format-version": True}, "got True"),
    ]):
        answer = client.post("/v1/namespaces/ns/tables", json={"name": f"v{index}", "schema": SCHEMA_JSON, **body})
        expect(answer, 400, fragment)
    # Version 3 tables are created and committed for other engines (Spark writes them); icefloe's
    # own writers refuse them (tests/flight_server/web/test_spark_row_deletes.py).
    for version in ("1", "2", "3"):
        created = client.post("/v1/namespaces/ns/tables", json={
            "name": f"ok{version}", "schema": SCHEMA_JSON, "properties": {"format-version": version},
            "stage-create": True})
        assert created.status_code == 200 and created.json()["metadata"]["format-version"] == int(version)


@pytest.mark.usefixtures("nothing_committed")
def test_shapes_that_were_a_500(client: httpx.Client) -> None:
    commit = "/v1/namespaces/ns/tables/t"
    for wrong in ([], {}, ["set-properties"]):  # unhashable: `in` a frozenset raised TypeError
        expect(client.post(commit, json={"updates": [{"action": wrong}]}), 400, "unsupported update action")
        expect(client.post(commit, json={"requirements": [{"type": wrong}]}), 400, "unsupported requirement type")
    # pyiceberg's validator reads data["statistics"] before pydantic checks it is there
    no_stats = {"updates": [{"action": "set-statistics", "snapshot-id": 1}]}
    expect(client.post(commit, json=no_stats), 400, "'statistics' is missing")
    for fields, fragment in [([1], "write-order is invalid"), ([None], "write-order is invalid")]:
        body = {"name": "x", "schema": SCHEMA_JSON, "write-order": {"order-id": 1, "fields": fields}}
        expect(client.post("/v1/namespaces/ns/tables", json=body), 400, fragment)
    for kind, fragment in [("decimal(99,2)", "precision"), ("fixed[-1]", "fixed"), ("zzz", "")]:
        schema = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": kind, "required": False}]}
        expect(client.post("/v1/namespaces/ns/tables", json={"name": "x", "schema": schema}), 400, fragment)
        add = {"updates": [{"action": "add-schema", "schema": {**schema, "schema-id": 1}}]}
        expect(client.post(commit, json=add), 400, fragment)
    spec = {"spec-id": 0, "fields": [{"source-id": 1, "field-id": 1000, "transform": "bucket[x]", "name": "b"}]}
    expect(client.post("/v1/namespaces/ns/tables", json={"name": "x", "schema": SCHEMA_JSON, "partition-spec": spec}),
           400, "bucket[x]")


def test_removing_a_property_that_is_not_set_is_a_no_op(server: ServerProcess, client: httpx.Client) -> None:
    """As in Iceberg-Java; pyiceberg's apply raised KeyError (a 500)."""
    before = head_seq(server.warehouse)
    body = {"updates": [{"action": "remove-properties", "removals": ["never-set"]}]}
    answer = client.post("/v1/namespaces/ns/tables/t", json=body)
    assert answer.status_code == 200, answer.text
    assert "never-set" not in answer.json()["metadata"]["properties"]
    assert head_seq(server.warehouse) <= before + 1  # a commit that changes nothing may be skipped
