"""KUBE_ALLOWED_HOSTS: the Kubernetes API servers a kubeconfig may name, and the addresses
the client may connect to (public ones, and the private ones an entry names)."""

from __future__ import annotations

import pytest

from capvco_web.integrations.kube import AllowedServers

ALLOWED = AllowedServers(
    [
        "api.prod.example",
        ".k8s.example",
        "https://mgmt.example:6443",
        "http://127.0.0.1:8082",
        "10.20.0.0/16",
        "192.0.2.7",
        "[fd00::5]",
    ]
)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.prod.example:6443",
        "https://API.prod.example.:443/",
        "https://one.k8s.example:6443",
        "https://a.b.k8s.example",
        "https://mgmt.example:6443/clusters/x",
        "http://127.0.0.1:8082/clusters/demo",
        "https://10.20.3.4:6443",
        "https://192.0.2.7:6443",
        "https://[fd00::5]:6443",
    ],
)
def test_a_listed_server_is_allowed(url: str) -> None:
    assert ALLOWED.refusal(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://evil.example:6443", "evil.example is not in KUBE_ALLOWED_HOSTS"),
        ("https://api.prod.example.evil.example", "not in KUBE_ALLOWED_HOSTS"),
        ("https://k8s.example", "not in KUBE_ALLOWED_HOSTS"),  # the domain itself is not under it
        ("https://xk8s.example", "not in KUBE_ALLOWED_HOSTS"),
        ("https://mgmt.example:443", "not in KUBE_ALLOWED_HOSTS"),  # listed with port 6443 only
        ("http://api.prod.example:6443", "plain http is allowed only to an origin listed"),
        ("http://127.0.0.1:6379", "http://127.0.0.1:6379 is not in KUBE_ALLOWED_HOSTS"),
        ("https://127.0.0.1:8082", "not in KUBE_ALLOWED_HOSTS"),
        ("https://10.21.0.1:6443", "not in KUBE_ALLOWED_HOSTS"),
        ("https://169.254.169.254", "not in KUBE_ALLOWED_HOSTS"),
        ("https://api.prod.example@evil.example", "user or password"),
        ("https://evil.example#@api.prod.example", "evil.example is not in"),
        ("gopher://api.prod.example", "use https"),
        ("https://api.prod.example:99999", "port"),
        ("https://api.prod.example\n:6443", "control characters"),
    ],
)
def test_any_other_server_is_refused_naming_why(url: str, problem: str) -> None:
    assert problem in (ALLOWED.refusal(url) or "")


def test_an_empty_list_allows_none_and_says_so() -> None:
    assert "KUBE_ALLOWED_HOSTS is empty" in (AllowedServers([]).refusal("https://a:6443") or "")


@pytest.mark.parametrize(
    ("address", "port"),
    [
        ("203.0.114.9", 6443),  # public
        ("2a00:1450::1", 6443),
        ("64:ff9b::cb00:7209", 6443),  # NAT64 of a public address
        ("10.20.9.9", 1),  # in a listed range, any port
        ("192.0.2.7", 6443),  # listed (as a host, any port)
        ("fd00::5", 443),
        ("127.0.0.1", 8082),  # listed with its port
    ],
)
def test_an_address_is_connected_to_when_public_or_named(address: str, port: int) -> None:
    assert ALLOWED.address_refusal(address, port) is None


@pytest.mark.parametrize(
    ("address", "port"),
    [
        ("127.0.0.1", 6379),  # named for port 8082 only
        ("127.0.0.2", 8082),
        ("::1", 8082),
        ("::ffff:127.0.0.1", 8082 + 1),
        ("10.0.0.1", 6443),
        ("172.16.0.1", 6443),
        ("192.168.1.1", 6443),
        ("169.254.169.254", 80),  # the cloud's metadata service
        ("100.64.0.1", 6443),  # carrier-grade NAT
        ("fe80::1%eth0", 6443),
        ("fc00::1", 6443),
        ("0.0.0.0", 6443),  # noqa: S104 - an address refused, not bound
        ("224.0.0.1", 6443),
        ("2002:7f00:1::", 6443),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", 6443),  # NAT64 of 10.0.0.1
        ("::7f00:1", 6443),  # IPv4-compatible 127.0.0.1
    ],
)
def test_a_non_public_address_is_refused_unless_named(address: str, port: int) -> None:
    assert "not a public address" in (ALLOWED.address_refusal(address, port) or "")


@pytest.mark.parametrize(
    "entry",
    ["*.k8s.example", "ftp://a", "https://a/path", "10.0.0.1/8", "https://u:p@a", "a b", "."],
)
def test_an_entry_that_is_none_of_the_forms_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="KUBE_ALLOWED_HOSTS"):
        AllowedServers([entry])


def test_entries_read_back_normalised() -> None:
    assert AllowedServers(
        ["API.example.", "https://m.example:6443", "http://127.0.0.1", ".K8s.example", "10.0.0.0/8"]
    ).entries == (
        "api.example",
        "https://m.example:6443",
        "http://127.0.0.1:80",
        ".k8s.example",
        "10.0.0.0/8",
    )
