"""Hostile input to the REST catalog: a precise 4xx with the spec's error body, nothing
committed, and the server still up. No answer carries a server path or a traceback."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.flight_server.web.rest_support import head_seq, rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64())])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with rest_server(tmp_path_factory.mktemp("bad") / "wh") as proc:
        rest = RestCatalog("r", uri=rest_url(proc))
        rest.create_namespace("ns")
        rest.create_table("ns.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    # A REST client says its bodies are JSON (as pyiceberg and Iceberg-Java do), even bad ones.
    with httpx.Client(base_url=rest_url(server), timeout=30, headers={"content-type": "application/json"}) as http:
        yield http


def expect(answer: httpx.Response, status: int, kind: str, fragment: str = "") -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == kind and error["code"] == status, error
    assert fragment.lower() in error["message"].lower(), error
    assert "Traceback" not in answer.text and "/tmp/" not in answer.text


@pytest.fixture(autouse=True)
def nothing_committed(server: ServerProcess) -> Iterator[None]:
    before = head_seq(server.warehouse)
    yield
    assert head_seq(server.warehouse) == before, "bad input must commit nothing"
    assert httpx.get(f"{rest_url(server)}/v1/config", timeout=10).status_code == 200, "server must stay up"


def table_uuid(client: httpx.Client) -> str:
    return str(client.get("/v1/namespaces/ns/tables/t").json()["metadata"]["table-uuid"])


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b"\xff\xfe", b"", b'{"a": 1e999999999}x', b"[" * 100_000])
def test_malformed_json(client: httpx.Client, body: bytes) -> None:
    expect(client.post("/v1/namespaces/ns/tables/t", content=body), 400, "BadRequestException")
    expect(client.post("/v1/namespaces", content=body), 400, "BadRequestException")


def test_huge_integer_is_refused(client: httpx.Client) -> None:
    body = b'{"namespace": ["x"], "properties": {"a": ' + b"9" * 5000 + b"}}"
    expect(client.post("/v1/namespaces", content=body), 400, "BadRequestException")


@pytest.mark.parametrize("update,fragment", [
    ({"action": "drop-everything"}, "unsupported update action 'drop-everything'"),
    ({"action": "set-properties"}, "updates[0] is invalid"),
    ({"action": "set-properties", "updates": ["k"]}, "updates[0] is invalid"),
    ({"action": "set-location", "location": "/etc"}, "inside the catalog's warehouse"),
    ({"action": "set-location", "location": "file:///tmp/../etc"}, "inside the catalog's warehouse"),
    ({"action": "add-schema", "schema": {"type": "struct", "fields": "nope"}}, "updates[0] is invalid"),
    ({"action": "set-current-schema", "schema-id": 99}, "schema"),
    ({"action": "upgrade-format-version", "format-version": 1}, "downgrade"),
    ("not an object", "must be a JSON object"),
])
def test_bad_updates(client: httpx.Client, update: Any, fragment: str) -> None:
    body = {"requirements": [{"type": "assert-table-uuid", "uuid": table_uuid(client)}], "updates": [update]}
    expect(client.post("/v1/namespaces/ns/tables/t", json=body), 400, "BadRequestException", fragment)


def test_wrong_or_unknown_requirements(client: httpx.Client) -> None:
    update = [{"action": "set-properties", "updates": {"k": "v"}}]
    wrong = {"requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
             "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/t", json=wrong), 409, "CommitFailedException")
    stale = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}], "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/t", json=stale), 409, "CommitFailedException")
    exists = {"requirements": [{"type": "assert-create"}], "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/t", json=exists), 409, "CommitFailedException")
    unknown = {"requirements": [{"type": "assert-nothing"}], "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/t", json=unknown), 400, "BadRequestException", "assert-nothing")
    other = {"identifier": {"namespace": ["ns"], "name": "other"}, "requirements": [], "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/t", json=other), 400, "BadRequestException", "another table")
    missing = {"requirements": [{"type": "assert-table-uuid", "uuid": table_uuid(client)}], "updates": update}
    expect(client.post("/v1/namespaces/ns/tables/missing", json=missing), 404, "NoSuchTableException")
    assert "k" not in client.get("/v1/namespaces/ns/tables/t").json()["metadata"]["properties"]


def test_huge_bodies(client: httpx.Client) -> None:
    big = b'{"namespace": ["x"], "properties": {"a": "' + b"x" * (17 * 1024 * 1024) + b'"}}'
    expect(client.post("/v1/namespaces", content=big), 413, "BadRequestException", "larger than")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bound applies while reading
        yield b'{"namespace": ["x"], "properties": {"a": "'
        for _ in range(18):
            yield b"x" * (1024 * 1024)

    expect(client.post("/v1/namespaces", content=chunks()), 413, "BadRequestException", "larger than")


def raw_request(server: ServerProcess, method: str, path: str) -> tuple[int, bytes]:
    """Send ``path`` byte for byte (httpx would resolve ``..`` before sending)."""
    url = httpx.URL(rest_url(server))
    conn = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@pytest.mark.parametrize("segment", ["..", ".", "a%2Fb", "a%2F..%2F..", "%00", "a%00b", "%2E%2E", "a%5Cb",
                                     "%FF", "ns%1F", "%1Fns", "%20ns", "a%0Ab", "%2E"])
def test_path_tricks_in_names(server: ServerProcess, segment: str) -> None:
    for method, path in (("GET", f"/v1/namespaces/{segment}"), ("HEAD", f"/v1/namespaces/{segment}"),
                         ("GET", f"/v1/namespaces/{segment}/tables"), ("GET", f"/v1/namespaces/ns/tables/{segment}"),
                         ("HEAD", f"/v1/namespaces/ns/tables/{segment}"),
                         ("DELETE", f"/v1/namespaces/ns/tables/{segment}")):
        status, body = raw_request(server, method, path)
        assert status == 400, (method, path, status, body)
        if method != "HEAD":
            assert json.loads(body)["error"]["type"] == "BadRequestException"


@pytest.mark.parametrize("name", ["..", ".", "a/b", "\x00", "a\\b", " ns", "a\nb", "", "x" * 300])
def test_bad_names_in_bodies(client: httpx.Client, name: str) -> None:
    expect(client.post("/v1/namespaces", json={"namespace": [name]}), 400, "BadRequestException")
    expect(client.post("/v1/namespaces", json={"namespace": ["ns", name]}), 400, "BadRequestException")
    empty_schema = {"type": "struct", "fields": []}
    expect(client.post("/v1/namespaces/ns/tables", json={"name": name, "schema": empty_schema}),
           400, "BadRequestException")
    expect(client.post("/v1/tables/rename", json={"source": {"namespace": ["ns"], "name": "t"},
                                                   "destination": {"namespace": ["ns"], "name": name}}),
           400, "BadRequestException")
    assert client.get("/v1/namespaces").json()["namespaces"] == [["default"], ["ns"]]


def test_double_encoding_stays_a_name(client: httpx.Client) -> None:
    # %252F decodes once to the three characters "%2F": a name that does not exist (not a path).
    expect(client.get("/v1/namespaces/ns/tables/a%252Fb"), 404, "NoSuchTableException")
    expect(client.get("/v1/namespaces/a%252Fb"), 404, "NoSuchNamespaceException")


def test_locations_outside_the_warehouse_are_refused(client: httpx.Client, server: ServerProcess) -> None:
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    for location in ("/etc", "file:///etc/iceberg", f"{server.warehouse}/../elsewhere", "s3://bucket/t", "relative/t",
                     f"file://otherhost{server.warehouse}/ns/x"):
        answer = client.post("/v1/namespaces/ns/tables", json={"name": "x", "schema": schema, "location": location})
        expect(answer, 400, "BadRequestException", "inside the catalog's warehouse")
    register = {"name": "r", "metadata-location": "/etc/passwd"}
    expect(client.post("/v1/namespaces/ns/register", json=register), 400, "BadRequestException", "warehouse")
    inside_missing = {"name": "r", "metadata-location": f"{server.warehouse}/ns/none.metadata.json"}
    expect(client.post("/v1/namespaces/ns/register", json=inside_missing), 400, "BadRequestException")
    snapshot = {"snapshot-id": 42, "timestamp-ms": 1, "manifest-list": "/etc/passwd",
                "summary": {"operation": "append"}, "sequence-number": 2, "schema-id": 0}
    body = {"requirements": [], "updates": [{"action": "add-snapshot", "snapshot": snapshot}]}
    expect(client.post("/v1/namespaces/ns/tables/t", json=body), 400, "BadRequestException", "manifest-list")


def test_bad_shapes_and_routes(client: httpx.Client) -> None:
    expect(client.post("/v1/namespaces", json={"namespace": "ns2"}), 400, "BadRequestException", "array")
    expect(client.post("/v1/namespaces", json={"namespace": ["x"], "properties": {"a": 1}}),
           400, "BadRequestException", "string")
    expect(client.post("/v1/namespaces", json={"namespace": ["ns"]}), 409, "AlreadyExistsException")
    expect(client.post("/v1/namespaces/ns/properties", json={"removals": ["a"], "updates": {"a": "b"}}),
           422, "UnprocessableEntityException")
    expect(client.post("/v1/namespaces/ns/tables", json={"name": "x", "schema": {"fields": 3}}),
           400, "BadRequestException", "schema")
    expect(client.post("/v1/namespaces/ns/tables", json={"name": "t", "schema": {"type": "struct", "fields": []}}),
           409, "AlreadyExistsException")
    expect(client.post("/v1/tables/rename", json={"source": {"namespace": ["ns"], "name": "t"}}),
           400, "BadRequestException", "destination")
    expect(client.post("/v1/tables/rename", json={"source": {"namespace": ["ns"], "name": "nope"},
                                                   "destination": {"namespace": ["ns"], "name": "t2"}}),
           404, "NoSuchTableException")
    expect(client.post("/v1/tables/rename", json={"source": {"namespace": ["ns"], "name": "t"},
                                                   "destination": {"namespace": ["nope"], "name": "t2"}}),
           404, "NoSuchNamespaceException")
    expect(client.delete("/v1/namespaces/ns/tables/t", params={"purgeRequested": "maybe"}),
           400, "BadRequestException", "purgeRequested")
    expect(client.delete("/v1/namespaces/ns"), 409, "NamespaceNotEmptyException")
    expect(client.post("/v1/transactions/commit", json={"table-changes": []}), 400, "BadRequestException")
    expect(client.post("/v1/transactions/commit", json={"table-changes": [{"identifier": "ns.t"}]}),
           400, "BadRequestException")
    expect(client.put("/v1/namespaces"), 405, "MethodNotAllowedException")
    expect(client.get("/v1/no/such/endpoint"), 404, "NotFoundException")
    expect(client.get("/v1/namespaces", params={"parent": "nope"}), 404, "NoSuchNamespaceException")
    expect(client.get("/v1/namespaces/ns/tables/t", params={"snapshots": "some"}), 400, "BadRequestException")
    expect(client.get("/v1/config", params={"x": "y" * 10_000}), 400, "BadRequestException", "query string")
    token = client.post("/v1/oauth/tokens", data={"grant_type": "client_credentials"},
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert token.status_code == 400 and token.json()["error"] == "invalid_request"


def test_views_are_served_and_a_missing_namespace_is_404(client: httpx.Client) -> None:
    # Views are served since test_rest_views; their routes answer like the tables' ones.
    config = client.get("/v1/config").json()
    assert "GET /v1/{prefix}/namespaces/{namespace}/views" in config["endpoints"]
    missing = json.loads(client.get("/v1/namespaces/no_such_ns/views").text)["error"]
    assert (missing["code"], missing["type"]) == (404, "NoSuchNamespaceException")
