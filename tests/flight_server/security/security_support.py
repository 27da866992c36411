"""Data and builders for the security tests: passwords, a users file, certificates made here."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from flight_server.security.users import hash_password

# Passwords long and odd enough that a scan of logs and messages cannot find them by chance.
PASSWORDS = {
    "alice": "alice-Adm1n-pw-7f3c9e",
    "wendy": "wendy-Wr1te-pw-2b8d4a",
    "rita": "rita-R3ad-pw-91e0c6",
}
ROLES = {"alice": "admin", "wendy": "write", "rita": "read"}


def write_users_file(path: Path, passwords: dict[str, str] = PASSWORDS, roles: dict[str, str] = ROLES) -> Path:
    lines = []
    for name, password in passwords.items():
        lines += [f"[users.{name}]", f'role = "{roles[name]}"', f'password_hash = "{hash_password(password)}"', ""]
    path.write_text("\n".join(lines))
    return path


@dataclass
class Pki:
    folder: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path  # signed by a CA the server does not trust
    rogue_client_key: Path

    def read(self, path: Path) -> bytes:
        return path.read_bytes()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, name: str, server: bool
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(folder: Path) -> Pki:
    """A CA, a server and a client certificate, and a client certificate from a rogue CA."""
    ca, ca_key = _ca("icefloe test CA")
    server, server_key = _leaf(ca, ca_key, "localhost", server=True)
    client, client_key = _leaf(ca, ca_key, "test-client", server=False)
    rogue_ca, rogue_ca_key = _ca("rogue CA")
    rogue, rogue_key = _leaf(rogue_ca, rogue_ca_key, "rogue-client", server=False)
    return Pki(
        folder=folder,
        ca_cert=_write_cert(ca, folder / "ca.pem"),
        server_cert=_write_cert(server, folder / "server.pem"),
        server_key=_write_key(server_key, folder / "server.key"),
        client_cert=_write_cert(client, folder / "client.pem"),
        client_key=_write_key(client_key, folder / "client.key"),
        rogue_client_cert=_write_cert(rogue, folder / "rogue.pem"),
        rogue_client_key=_write_key(rogue_key, folder / "rogue.key"),
    )
