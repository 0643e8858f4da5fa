"""A pasted kubeconfig: only its current context is kept, and nothing in it may make the
control plane run a program or read a file of its own."""

from __future__ import annotations

import base64

import pytest
import yaml

from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()


def kubeconfig(user: dict[str, object], cluster: dict[str, object] | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "prod",
            "contexts": [
                {"name": "prod", "context": {"cluster": "prod", "user": "me"}},
                {"name": "lab", "context": {"cluster": "lab", "user": "lab-user"}},
            ],
            "clusters": [
                {"name": "prod", "cluster": cluster or {"server": "https://api.prod:6443"}},
                {"name": "lab", "cluster": {"server": "https://lab:6443"}},
            ],
            "users": [
                {"name": "me", "user": user},
                {"name": "lab-user", "user": {"exec": {"command": "aws"}}},  # not used
            ],
        }
    )


def test_only_the_current_context_its_cluster_and_user_are_kept() -> None:
    loaded = kubeconfig_load(
        kubeconfig(
            {"token": "t"}, {"server": "https://api.prod:6443", "certificate-authority-data": CA}
        )
    )

    assert (loaded.context, loaded.server) == ("prod", "https://api.prod:6443")
    assert [c["name"] for c in loaded.config["clusters"]] == ["prod"]
    assert loaded.config["users"] == [{"name": "me", "user": {"token": "t"}}]


def test_a_client_certificate_is_a_credential() -> None:
    user = {"client-certificate-data": CA, "client-key-data": CA}
    assert kubeconfig_load(kubeconfig(user)).server == "https://api.prod:6443"


@pytest.mark.parametrize(
    ("user", "cluster", "problem"),
    [
        ({"exec": {"command": "gke-gcloud-auth-plugin"}}, None, "authenticates with exec"),
        ({"auth-provider": {"name": "oidc"}}, None, "authenticates with auth-provider"),
        ({"tokenFile": "/var/run/secrets/token"}, None, "paste its content as token"),
        ({"client-certificate": "/c.pem", "client-key-data": CA}, None, "client-certificate"),
        ({"token": "t"}, {"server": "https://a", "certificate-authority": "/ca"}, "authority-data"),
        ({"token": "t", "as": "system:admin"}, None, "settings we do not support: as"),
        ({"client-certificate-data": CA}, None, "needs both client-certificate-data"),
        ({"token": "t"}, {"server": "ftp://api"}, "needs a server URL"),
        ({"token": "t"}, {"server": "https://a", "certificate-authority-data": "%%"}, "not base64"),
        ({}, None, "has no credential"),
    ],
    ids=[
        "exec", "auth-provider", "token-file", "certificate-file", "ca-file", "impersonation",
        "half-a-certificate", "server-scheme", "ca-not-base64", "no-credential",
    ],
)  # fmt: skip
def test_a_kubeconfig_that_would_run_or_read_something_of_ours_is_refused(
    user: dict[str, object], cluster: dict[str, object] | None, problem: str
) -> None:
    with pytest.raises(KubeconfigInvalid, match=problem):
        kubeconfig_load(kubeconfig(user, cluster))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("- a\n- b\n", "not a mapping"),
        ("apiVersion: v1\n", "no current-context"),
        ("current-context: x\ncontexts: []\n", "names context 'x' but does not define it"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_what_is_not_a_kubeconfig_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(KubeconfigInvalid, match=problem):
        kubeconfig_load(text)
