"""The simulator's own certificate authority and server certificate.

client-go (kubectl) sends a bearer token only over https, so the fake API server speaks
TLS like a real one: a self-signed CA of its own signs a certificate for 127.0.0.1,
::1, localhost and the host it listens on. The CA goes into every kubeconfig it hands
out (`certificate-authority-data`); the clients verify the server against it.

Kept in a directory (`--tls-dir`): a restarted simulator reuses its CA, so kubeconfigs
handed out before still verify.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    cert_file: Path
    key_file: Path

    @property
    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["http/1.1"])
        return context


def certificates(directory: Path, host: str) -> Certificates:
    """The CA and server certificate in `directory`, made when missing or when the server
    certificate does not name `host`."""
    directory.mkdir(parents=True, exist_ok=True)
    found = Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    ca_key_file = directory / "ca.key"
    if found.ca_file.exists() and ca_key_file.exists():
        ca_cert = x509.load_pem_x509_certificate(found.ca_file.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key)
        _write(ca_key_file, _key_pem(ca_key))
        _write(found.ca_file, ca_cert.public_bytes(serialization.Encoding.PEM))
    names = _names(host)
    if not (found.cert_file.exists() and found.key_file.exists() and _names_in(found, names)):
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _server_certificate(key, ca_cert, ca_key, names)
        _write(found.key_file, _key_pem(key))
        _write(found.cert_file, cert.public_bytes(serialization.Encoding.PEM))
    return found


def _names(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host and host != "localhost":
            names.append(x509.DNSName(host))
    else:
        if not address.is_unspecified and x509.IPAddress(address) not in names:
            names.append(x509.IPAddress(address))
    return names


def _names_in(found: Certificates, names: list[x509.GeneralName]) -> bool:
    cert = x509.load_pem_x509_certificate(found.cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return all(name in san for name in names)


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "capvco kube simulator CA")])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    names: list[x509.GeneralName],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)
