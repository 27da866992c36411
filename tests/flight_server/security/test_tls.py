"""TLS and mutual TLS with certificates generated in the test (cryptography)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest
from security_helpers import options, outcome
from security_support import PASSWORDS, Pki
from servers import ServerProcess


def _tls_args(pki: Pki) -> list[str]:
    return ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]


@pytest.fixture
def tls_server(warehouse: Path, pki: Pki, users_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(warehouse, [*_tls_args(pki), "--users", str(users_file)]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def mtls_server(warehouse: Path, pki: Pki) -> Iterator[ServerProcess]:
    proc = ServerProcess(warehouse, [*_tls_args(pki), "--tls-client-ca", str(pki.ca_cert)]).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_tls_server_announces_grpc_tls_and_verifies(tls_server: ServerProcess, pki: Pki) -> None:
    assert tls_server.location.startswith("grpc+tls://127.0.0.1:")
    assert "TLS on" in tls_server.log
    client = flight.FlightClient(tls_server.location, tls_root_certs=pki.read(pki.ca_cert))
    try:
        header = client.authenticate_basic_token("rita", PASSWORDS["rita"])
        assert isinstance(client.list_actions(options(header)), list)
        result, exc = outcome(lambda: client.list_actions(options()))
        assert result == "unauthenticated", exc
    finally:
        client.close()


def test_tls_client_that_does_not_trust_the_server_is_refused(tls_server: ServerProcess, pki: Pki) -> None:
    # The server certificate is signed by the test CA; a client trusting another CA must fail.
    client = flight.FlightClient(tls_server.location, tls_root_certs=pki.read(pki.rogue_client_cert))
    try:
        with pytest.raises(flight.FlightUnavailableError):
            client.list_actions(options())
    finally:
        client.close()


def test_plaintext_client_cannot_talk_to_tls_server(tls_server: ServerProcess) -> None:
    client = flight.FlightClient(tls_server.location.replace("grpc+tls://", "grpc://"))
    try:
        with pytest.raises(flight.FlightUnavailableError):
            client.list_actions(options())
    finally:
        client.close()


def test_mtls_client_with_valid_certificate_is_served(mtls_server: ServerProcess, pki: Pki) -> None:
    assert "mutual TLS on" in mtls_server.log
    client = flight.FlightClient(mtls_server.location, tls_root_certs=pki.read(pki.ca_cert),
                                 cert_chain=pki.read(pki.client_cert), private_key=pki.read(pki.client_key))
    try:
        assert isinstance(client.list_actions(options()), list)
    finally:
        client.close()


@pytest.mark.parametrize("which", ["no-certificate", "untrusted-certificate"])
def test_mtls_client_without_valid_certificate_is_refused(mtls_server: ServerProcess, pki: Pki, which: str) -> None:
    if which == "no-certificate":
        client = flight.FlightClient(mtls_server.location, tls_root_certs=pki.read(pki.ca_cert))
    else:
        client = flight.FlightClient(mtls_server.location, tls_root_certs=pki.read(pki.ca_cert),
                                     cert_chain=pki.read(pki.rogue_client_cert),
                                     private_key=pki.read(pki.rogue_client_key))
    try:
        with pytest.raises(flight.FlightUnavailableError):
            client.list_actions(options())
    finally:
        client.close()
    assert mtls_server.proc is not None and mtls_server.proc.poll() is None  # the server survives


@pytest.mark.parametrize("args, message", [
    (["--tls-cert", "CERT"], "--tls-cert and --tls-key must be given together"),
    (["--tls-client-ca", "CA"], "needs --tls-cert and --tls-key"),
    (["--tls-cert", "MISSING", "--tls-key", "MISSING"], "cannot be read"),
    (["--tls-cert", "USERS", "--tls-key", "USERS"], "is not a PEM file"),
])
def test_bad_tls_flags_fail_fast_with_a_clear_message(warehouse: Path, pki: Pki, users_file: Path,
                                                      args: list[str], message: str) -> None:
    subst = {"CERT": str(pki.server_cert), "CA": str(pki.ca_cert), "MISSING": str(pki.folder / "nope.pem"),
             "USERS": str(users_file)}
    proc = ServerProcess(warehouse, [subst.get(a, a) for a in args])
    with pytest.raises(RuntimeError, match="did not start"):
        proc.start(timeout=30)
    assert message in proc.log
    assert "Traceback" not in proc.log
