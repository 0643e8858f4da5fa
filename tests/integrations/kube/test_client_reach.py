"""Where the Kubernetes client sends a kubeconfig's credential, and what it keeps of an
answer: only to servers the allow-list allows, at an address it checked, never on through
a redirect or a proxy from the environment; of a failure, only the Kubernetes Status
message or the status's phrase. Real local listeners stand in for internal services."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from capvco_web.integrations import kube
from capvco_web.integrations.kube import AllowedServers, KubeconfigInvalid, kubeconfig_load
from capvco_web.integrations.kube.client import KubeClient
from tests.http_stub import HttpStub, Reply, redirect

SECRET = "redis_password=hunter2-internal"
TOKEN = "s3cret-service-account-token"
NODES = json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": []})


def kubeconfig(server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "prod",
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}],
            "clusters": [{"name": "prod", "cluster": {"server": server}}],
            "users": [{"name": "me", "user": {"token": TOKEN}}],
        }
    )


def client(server: str, *allowed: str) -> KubeClient:
    return KubeClient(
        kubeconfig=kubeconfig_load(kubeconfig(server)),
        allowed_servers=AllowedServers(allowed),
        timeout=(1.0, 1.0),
    )


class Listener:
    """A TCP port that accepts nothing by itself: `contacted()` says whether anything
    connected to it (the kernel completes the handshake, and the connection waits)."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(8)
        self._socket.setblocking(False)
        self.port = self._socket.getsockname()[1]
        self.origin = f"http://127.0.0.1:{self.port}"

    def contacted(self) -> bool:
        try:
            connection, _ = self._socket.accept()
        except BlockingIOError:
            return False
        connection.close()
        return True

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def test_a_server_outside_the_allow_list_is_never_contacted(listener: Listener) -> None:
    with client(listener.origin, "api.prod.example") as refused:
        listing = refused.list_nodes()

    assert isinstance(listing.error, kube.ServerNotAllowed) and not listing.error.retryable
    assert f"{listener.origin} is not in KUBE_ALLOWED_HOSTS" in str(listing.error)
    assert not listener.contacted()
    with pytest.raises(KubeconfigInvalid, match=f"is refused: {listener.origin} is not in"):
        KubeClient.from_text(
            kubeconfig(listener.origin), allowed_servers=AllowedServers(["api.prod.example"])
        )


def test_a_listed_name_that_resolves_to_an_address_nobody_named_is_not_connected_to(
    listener: Listener,
) -> None:
    # `localhost` is listed by name; it resolves to a loopback address the list does not
    # name, as a public name made to resolve to an internal address would (DNS rebinding):
    # the address connected to is the one checked.
    server = f"http://localhost:{listener.port}"
    with client(server, server) as refused:
        error = refused.list_nodes().error

    assert isinstance(error, kube.ServerNotAllowed)
    assert "is not a public address" in str(error) and "name it, or its range" in str(error)
    assert not listener.contacted()


def test_a_redirect_is_not_followed(
    http_stub: Callable[[Reply], HttpStub], listener: Listener
) -> None:
    stub = http_stub(redirect(307, f"{listener.origin}/api/v1/nodes"))
    with client(stub.origin, stub.origin, listener.origin) as redirected:
        error = redirected.list_nodes().error

    assert isinstance(error, kube.UnexpectedResponse) and error.status == 307
    assert len(stub.received) == 1
    assert not listener.contacted()


def test_a_proxy_from_the_environment_is_not_used(
    http_stub: Callable[[Reply], HttpStub], listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, listener.origin)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    stub = http_stub(Reply(200, NODES.encode(), {"Content-Type": "application/json"}))

    with client(stub.origin, stub.origin) as direct:
        listing = direct.list_nodes()

    assert listing.complete, listing.error
    sent = [{k.lower(): v for k, v in r.headers.items()} for r in stub.received]
    assert [headers.get("authorization") for headers in sent] == [f"Bearer {TOKEN}"]
    assert not listener.contacted()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(500, f"{SECRET}\n".encode() * 20, {"Content-Type": "text/plain"}), None),
        (Reply(503, b"<html><body>" + SECRET.encode() + b"</body></html>"), None),
        (Reply(404, json.dumps({"message": SECRET, "reason": "NotFound"}).encode()), None),
        (Reply(401, json.dumps({"kind": "Status", "message": 7}).encode()), None),
        (
            Reply(
                403,
                json.dumps(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": 'nodes is forbidden: User "observer" cannot list nodes\n'
                        + SECRET,
                        "reason": "Forbidden",
                        "code": 403,
                    }
                ).encode(),
            ),
            'nodes is forbidden: User "observer" cannot list nodes',
        ),
    ],
    ids=["text", "html", "json-not-a-status", "status-without-text", "status-two-lines"],
)
def test_a_failure_keeps_only_the_status_message_never_the_body(
    http_stub: Callable[[Reply], HttpStub], reply: Reply, message: str | None
) -> None:
    stub = http_stub(reply)
    with client(stub.origin, stub.origin) as answered:
        error = answered.list_nodes().error

    assert error is not None and error.status == reply.status
    assert SECRET not in str(error) + repr(error)
    phrases = {500: "Internal Server Error", 503: "Service Unavailable", 404: "Not Found"}
    assert error.message == (message or phrases.get(reply.status, "Unauthorized"))


def test_a_status_message_is_one_bounded_line() -> None:
    from capvco_web.integrations.kube.client import _MAX_MESSAGE, _status_of

    body = json.dumps(
        {"kind": "Status", "message": "x" * 10_000 + "\u202e\x1b[2J", "reason": "A B"}
    )
    message, reason = _status_of(body)
    assert len(message) == _MAX_MESSAGE and message.endswith("…") and reason == ""


def test_what_a_service_that_is_not_http_answers_is_not_kept() -> None:
    # A Redis, say: it answers a line that is no HTTP status line, and closes.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        connection.recv(65536)
        connection.sendall(f"-ERR {SECRET}\r\n".encode())
        connection.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    origin = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with client(origin, origin) as answered:
            error = answered.list_nodes().error
    finally:
        thread.join(5)
        server.close()

    assert isinstance(error, kube.Unreachable)
    assert SECRET not in str(error) + repr(error)


def self_signed(name: str) -> tuple[bytes, bytes]:
    """A certificate (PEM) for `name` (a DNS name, or an IP address) and its key (PEM)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        alt = x509.DNSName(name)
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


@pytest.mark.parametrize("name", ["127.0.0.1", "api.prod.example"], ids=["address", "sni"])
def test_https_is_verified_over_the_checked_connection(
    http_stub: Callable[[Reply], HttpStub], tmp_path: Path, name: str
) -> None:
    certificate, key = self_signed(name)
    (tmp_path / "cert.pem").write_bytes(certificate)
    (tmp_path / "key.pem").write_bytes(key)
    stub = http_stub(Reply(200, NODES.encode(), {"Content-Type": "application/json"}))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    stub._server.socket = context.wrap_socket(stub._server.socket, server_side=True)
    server = stub.origin.replace("http://", "https://")
    config = yaml.safe_load(kubeconfig(server))
    cluster = config["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(certificate).decode()
    if name != "127.0.0.1":
        cluster["tls-server-name"] = name

    with KubeClient(
        kubeconfig=kubeconfig_load(yaml.safe_dump(config)),
        allowed_servers=AllowedServers([server]),
        timeout=(2.0, 2.0),
    ) as verified:
        listing = verified.list_nodes()
    del cluster["certificate-authority-data"]
    with KubeClient(
        kubeconfig=kubeconfig_load(yaml.safe_dump(config)),
        allowed_servers=AllowedServers([server]),
        timeout=(2.0, 2.0),
    ) as unverified:
        refused = unverified.list_nodes()

    assert listing.complete, listing.error
    assert isinstance(refused.error, kube.Unreachable) and "CERTIFICATE_VERIFY_FAILED" in str(
        refused.error
    )
