"""REST catalog with ``--users``: OAuth2 client credentials issue Flight's bearer tokens,
roles apply (read: load/list, write: commit/create/drop, admin: namespace properties) and the
principal is on every REST commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, OAuthError, UnauthorizedError

from tests.flight_server.feed.feed_helpers import FeedReader
from tests.flight_server.security.security_support import PASSWORDS, make_pki, write_users_file
from tests.flight_server.web.rest_support import rest_server, rest_url
from tests.servers import ServerProcess

SCHEMA = pa.schema([pa.field("id", pa.int64())])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("auth")
    users = write_users_file(folder / "users.toml")
    users.chmod(0o600)
    with rest_server(folder / "wh", ["--users", str(users)]) as proc:
        yield proc


def catalog(server: ServerProcess, user: str) -> RestCatalog:
    return RestCatalog(user, uri=rest_url(server), credential=f"{user}:{PASSWORDS[user]}")


def token(server: ServerProcess, user: str, password: str) -> httpx.Response:
    return httpx.post(f"{rest_url(server)}/v1/oauth/tokens", timeout=30, data={
        "grant_type": "client_credentials", "client_id": user, "client_secret": password, "scope": "catalog"})


def test_tokens_from_client_credentials(server: ServerProcess) -> None:
    answer = token(server, "wendy", PASSWORDS["wendy"])
    assert answer.status_code == 200
    body = answer.json()
    assert body["token_type"] == "bearer" and body["expires_in"] > 0
    assert body["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    wrong = token(server, "wendy", "not-her-password")
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    assert PASSWORDS["wendy"] not in wrong.text
    unknown = token(server, "mallory", "x")
    assert unknown.status_code == 401 and unknown.json()["error"] == "invalid_client"
    grant = httpx.post(f"{rest_url(server)}/v1/oauth/tokens", data={"grant_type": "password"}, timeout=30)
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"
    with pytest.raises(OAuthError):
        RestCatalog("bad", uri=rest_url(server), credential="wendy:wrong")

    # The same token works on the Flight port.
    client = flight.FlightClient(server.location)
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {body['access_token']}".encode())])
    assert list(client.list_actions(options))
    client.close()

    # Token exchange (Iceberg-Java's refresh) renews a valid token, refuses a forged one.
    renewed = httpx.post(f"{rest_url(server)}/v1/oauth/tokens", timeout=30, data={
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": body["access_token"],
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token"})
    assert renewed.status_code == 200 and renewed.json()["access_token"]
    forged = httpx.post(f"{rest_url(server)}/v1/oauth/tokens", timeout=30, data={
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": "icefloe1.e30.AAAA"})
    assert forged.status_code == 401


def test_calls_without_or_with_bad_tokens_are_401(server: ServerProcess) -> None:
    for headers in ({}, {"authorization": "Bearer nonsense"}, {"authorization": "Digest x"}):
        answer = httpx.get(f"{rest_url(server)}/v1/namespaces", headers=headers, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["type"] == "NotAuthorizedException"
    with pytest.raises(UnauthorizedError):
        RestCatalog("anon", uri=rest_url(server))


def test_roles_and_principal_on_commits(server: ServerProcess) -> None:
    admin, writer, reader = catalog(server, "alice"), catalog(server, "wendy"), catalog(server, "rita")
    writer.create_namespace("team")
    with _admin_feed(server) as feed:
        feed.wait_for("hello")
        table = writer.create_table("team.t", SCHEMA)
        table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
        events = feed.events(2)
    assert [(e["operation"], e["principal"]) for e in events] == [("create", "wendy"), ("append", "wendy")]

    assert reader.load_table("team.t").scan().to_arrow().num_rows == 2
    assert reader.list_tables("team") == [("team", "t")]
    with pytest.raises(ForbiddenError):
        reader.load_table("team.t").append(pa.table({"id": [3]}, schema=SCHEMA))
    with pytest.raises(ForbiddenError):
        reader.create_table("team.u", SCHEMA)
    with pytest.raises(ForbiddenError):
        reader.drop_table("team.t")
    with pytest.raises(ForbiddenError):
        writer.update_namespace_properties("team", updates={"owner": "wendy"})
    admin.update_namespace_properties("team", updates={"owner": "alice"})
    assert reader.load_namespace_properties("team") == {"owner": "alice"}
    assert reader.load_table("team.t").scan().to_arrow().num_rows == 2


def _admin_feed(server: ServerProcess) -> FeedReader:
    bearer = token(server, "alice", PASSWORDS["alice"]).json()["access_token"]
    return FeedReader(server.location, {"feed": "commits.v1", "after": "latest"},
                      headers=[(b"authorization", f"Bearer {bearer}".encode())])


def test_errors_carry_no_server_path(server: ServerProcess) -> None:
    bearer = token(server, "rita", PASSWORDS["rita"]).json()["access_token"]
    answer = httpx.get(f"{rest_url(server)}/v1/namespaces/nope", timeout=30,
                       headers={"authorization": f"Bearer {bearer}"})
    assert answer.status_code == 404 and answer.json()["error"]["type"] == "NoSuchNamespaceException"
    assert str(server.warehouse) not in answer.text


def test_rest_over_tls_with_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    users = write_users_file(tmp_path / "users.toml")
    users.chmod(0o600)
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--users", str(users)]
    with rest_server(tmp_path / "wh", tls) as proc:
        url = rest_url(proc)
        assert url.startswith("https://")
        # pyiceberg's token request does not use its ssl.cabundle: requests' own variable does.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca_cert))
        rest = RestCatalog("tls", uri=url, credential=f"wendy:{PASSWORDS['wendy']}")
        rest.create_namespace("sec")
        rest.create_table("sec.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
        assert rest.load_table("sec.t").scan().to_arrow().num_rows == 1
        with pytest.raises(httpx.ConnectError):  # an unknown CA is refused by the client
            httpx.get(f"{url}/v1/config", timeout=10)
