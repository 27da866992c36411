"""Logins through the stock drivers: ADBC (arrow-go) and the Arrow Flight SQL JDBC driver."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pytest
from jdbc_support import JAVA_OPENS, driver_jar_or_skip
from security_support import PASSWORDS, Pki
from servers import ServerProcess

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tls_auth_server(tmp_path_factory: pytest.TempPathFactory, users_file: Path, pki: Pki) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("wh") / "warehouse", [
        "--users", str(users_file), "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]).start()
    try:
        yield proc
    finally:
        proc.stop()


def _adbc_connect(location: str, user: str | None, password: str | None,
                  extra: dict[str, str] | None = None) -> adbc_driver_manager.dbapi.Connection:
    kwargs = dict(extra or {})
    if user is not None and password is not None:
        kwargs.update({"username": user, "password": password})
    return flightsql.connect(location, db_kwargs=kwargs, autocommit=True)


def _adbc_query_outcome(conn: adbc_driver_manager.dbapi.Connection) -> str:
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT 1")
            cur.fetchall()
            return "ok"
        except adbc_driver_manager.Error as exc:
            return str(exc)


@pytest.mark.parametrize("user", sorted(PASSWORDS))
def test_adbc_login_then_calls_get_past_auth(auth_server: ServerProcess, user: str) -> None:
    conn = _adbc_connect(auth_server.location, user, PASSWORDS[user])
    try:
        assert _adbc_query_outcome(conn) == "ok"
    finally:
        conn.close()


def test_adbc_wrong_password_and_no_credentials_are_unauthenticated(auth_server: ServerProcess) -> None:
    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED.*invalid username or password"):
        _adbc_connect(auth_server.location, "rita", "not-" + PASSWORDS["rita"])
    conn = _adbc_connect(auth_server.location, None, None)
    try:
        outcome = _adbc_query_outcome(conn)
        assert "UNAUTHENTICATED" in outcome and "authentication required" in outcome
    finally:
        conn.close()


def test_adbc_over_verified_tls(tls_auth_server: ServerProcess, pki: Pki) -> None:
    opts = {adbc_driver_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: pki.ca_cert.read_text()}
    conn = _adbc_connect(tls_auth_server.location, "rita", PASSWORDS["rita"], opts)
    try:
        assert _adbc_query_outcome(conn) == "ok"
    finally:
        conn.close()


def _jdbc(url: str, user: str | None = None, password: str | None = None, sql: str | None = None) -> list[str]:
    jar = driver_jar_or_skip(need_javac=False)
    args = ["java", JAVA_OPENS, "-cp", str(jar), str(HERE / "JdbcLogin.java"), url]
    if user is not None and password is not None:
        args += [user, password]
        if sql is not None:
            args.append(sql)
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return [line for line in result.stdout.splitlines() if line.split(" ")[0] in
            {"CONNECTED", "CONNECT_ERROR", "QUERY_OK", "QUERY_ERROR"}]


def _port(server: ServerProcess) -> str:
    return server.location.rsplit(":", 1)[1]


def test_jdbc_login_with_each_outcome(auth_server: ServerProcess) -> None:
    url = f"jdbc:arrow-flight-sql://127.0.0.1:{_port(auth_server)}?useEncryption=false"
    good = _jdbc(url, "wendy", PASSWORDS["wendy"])
    assert good[0] == "CONNECTED", good
    assert good[1] == "QUERY_OK 1", good
    bad = _jdbc(url, "wendy", "not-" + PASSWORDS["wendy"])
    assert bad[0].startswith("CONNECT_ERROR") and "invalid username or password" in bad[0], bad
    assert PASSWORDS["wendy"] not in " ".join(bad)
    anonymous = _jdbc(url)
    assert any("authentication required" in line for line in anonymous), anonymous
    assert "login: user 'wendy' (role write)" in auth_server.log
    denied = _jdbc(url, "rita", PASSWORDS["rita"], "INSERT INTO ns.t VALUES (1)")
    assert denied[0] == "CONNECTED" and denied[1].startswith("QUERY_ERROR"), denied
    assert "user 'rita' has role read; this needs role write" in denied[1], denied
    auth_server.stop()
    for secret in PASSWORDS.values():
        assert secret not in auth_server.log
    assert "Traceback" not in auth_server.log and "Bearer ifl1." not in auth_server.log


def test_jdbc_over_verified_tls(tls_auth_server: ServerProcess, pki: Pki) -> None:
    url = (f"jdbc:arrow-flight-sql://localhost:{_port(tls_auth_server)}?useEncryption=true"
           f"&useSystemTrustStore=false&tlsRootCerts={pki.ca_cert}")
    lines = _jdbc(url, "rita", PASSWORDS["rita"])
    assert lines == ["CONNECTED", "QUERY_OK 1"], lines
    untrusted = _jdbc(url.replace(str(pki.ca_cert), str(pki.rogue_client_cert)), "rita", PASSWORDS["rita"])
    assert untrusted and untrusted[0].startswith("CONNECT_ERROR"), untrusted


@pytest.fixture(scope="module")
def mtls_auth_server(tmp_path_factory: pytest.TempPathFactory, users_file: Path, pki: Pki) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("wh") / "warehouse", [
        "--users", str(users_file), "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca_cert)]).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_adbc_mutual_tls(mtls_auth_server: ServerProcess, pki: Pki) -> None:
    options = adbc_driver_flightsql.DatabaseOptions
    trust = {options.TLS_ROOT_CERTS.value: pki.ca_cert.read_text()}
    with_cert = {**trust, options.MTLS_CERT_CHAIN.value: pki.client_cert.read_text(),
                 options.MTLS_PRIVATE_KEY.value: pki.client_key.read_text()}
    conn = _adbc_connect(mtls_auth_server.location, "alice", PASSWORDS["alice"], with_cert)
    try:
        assert _adbc_query_outcome(conn) == "ok"
    finally:
        conn.close()
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unavailable"):  # gRPC code 14
        _adbc_connect(mtls_auth_server.location, "alice", PASSWORDS["alice"], trust)
    rogue = {**trust, options.MTLS_CERT_CHAIN.value: pki.rogue_client_cert.read_text(),
             options.MTLS_PRIVATE_KEY.value: pki.rogue_client_key.read_text()}
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unavailable"):  # gRPC code 14
        _adbc_connect(mtls_auth_server.location, "alice", PASSWORDS["alice"], rogue)


def test_adbc_with_a_bearer_token_option(auth_server: ServerProcess) -> None:
    """Services can log in once and pass the token (ADBC's authorization_header option)."""
    import pyarrow.flight as flight

    client = flight.FlightClient(auth_server.location)
    _, bearer = client.authenticate_basic_token("rita", PASSWORDS["rita"])
    client.close()
    option = adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value
    conn = _adbc_connect(auth_server.location, None, None, {option: bearer.decode()})
    try:
        assert _adbc_query_outcome(conn) == "ok"
    finally:
        conn.close()
    conn = _adbc_connect(auth_server.location, None, None, {option: "Bearer ifl1.forged.token"})
    try:
        assert "UNAUTHENTICATED" in _adbc_query_outcome(conn)
    finally:
        conn.close()


def test_jdbc_mutual_tls(mtls_auth_server: ServerProcess, pki: Pki) -> None:
    url = (f"jdbc:arrow-flight-sql://localhost:{_port(mtls_auth_server)}?useEncryption=true"
           f"&useSystemTrustStore=false&tlsRootCerts={pki.ca_cert}")
    with_cert = _jdbc(f"{url}&clientCertificate={pki.client_cert}&clientKey={pki.client_key}",
                      "alice", PASSWORDS["alice"])
    assert with_cert == ["CONNECTED", "QUERY_OK 1"], with_cert
    without = _jdbc(url, "alice", PASSWORDS["alice"])
    assert without and without[0].startswith("CONNECT_ERROR"), without


@pytest.fixture
def short_token_server(warehouse: Path, users_file: Path) -> Iterator[ServerProcess]:
    import pyarrow as pa

    from catalog import RocksCatalog

    catalog = RocksCatalog("setup", warehouse=str(warehouse))
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=pa.schema([pa.field("x", pa.int64())]))
    catalog.close()
    proc = ServerProcess(warehouse, ["--users", str(users_file), "--token-ttl", "6"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_adbc_connection_outlives_its_first_token_through_renewal(short_token_server: ServerProcess) -> None:
    """Tokens live 6 s; a connection used every 3.5 s gets renewed tokens and keeps working,
    in the same Flight SQL session (sessions are keyed by the login, not the token string)."""
    conn = _adbc_connect(short_token_server.location, "rita", PASSWORDS["rita"])
    try:
        # a session option set with the first token must survive the renewals
        conn.adbc_connection.set_options(**{"adbc.flight.sql.session.option.schema": "ns"})
        for pause in [0.0, 3.5, 3.5, 3.5]:  # the last call is 10.5 s after the login
            time.sleep(pause)
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM t")  # unqualified: resolved in the session's schema
                assert cur.fetchall() == [(0,)]
    finally:
        conn.close()

