"""A pasted kubeconfig: only its current context is kept, and nothing in it may make the
control plane run a program or read a file of its own."""

from __future__ import annotations

import base64
import re

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


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: " + "[" * 400 + "]" * 400 + "\n", "deeper than 32 levels"),
        ("".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + f"{'  ' * 40}v\n", "deeper than 32"),
        ("a: [" + "1," * 30_000 + "1]\n", "more than 20000 values"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
            "aliases",
        ),
    ],
    ids=["flow-400-deep", "block-40-deep", "many-values", "billion-laughs"],
)
def test_yaml_is_bounded_in_depth_values_and_aliases_as_json_bodies_are(
    text: str, problem: str
) -> None:
    with pytest.raises(KubeconfigInvalid, match=problem):
        kubeconfig_load(text)


def test_a_kubeconfig_nested_as_deep_as_json_bodies_may_be_still_reads() -> None:
    config = yaml.safe_load(kubeconfig({"token": "t"}))
    deep: object = "x"
    for _ in range(26):  # below the 6 levels from the top to an extension: 32 in all
        deep = [deep]
    config["users"][0]["user"]["extensions"] = [{"name": "deep", "extension": deep}]
    assert kubeconfig_load(yaml.safe_dump(config)).server == "https://api.prod:6443"
    config["users"][0]["user"]["extensions"][0]["extension"] = [deep]
    with pytest.raises(KubeconfigInvalid, match="deeper than 32"):
        kubeconfig_load(yaml.safe_dump(config))


@pytest.mark.parametrize(
    ("user", "cluster", "problem"),
    [
        ({"token": {"a": "b"}}, None, "User 'me': token must be text, not a mapping"),
        ({"token": ["t"]}, None, "User 'me': token must be text, not a list"),
        ({"token": 123456}, None, "User 'me': token must be text, not a number"),
        ({"username": "u", "password": {"p": 1}}, None, "password must be text, not a mapping"),
        ({"client-certificate-data": {"a": 1}, "client-key-data": CA}, None, "must be text"),
        ({"token": "t", "extensions": {"a": 1}}, None, "extensions must be a list"),
        (
            {"token": "t"},
            {"server": "https://api.prod:6443", "tls-server-name": {"host": "x"}},
            "Cluster 'prod': tls-server-name must be text, not a mapping",
        ),
        ({"token": "t"}, {"server": 6443}, "Cluster 'prod': server must be text, not a number"),
        ({"token": "t"}, {"server": ["https://a"]}, "server must be text, not a list"),
        (
            {"token": "t"},
            {"server": "https://api.prod:6443", "insecure-skip-tls-verify": "false"},
            "insecure-skip-tls-verify must be true or false, not text",
        ),
        (
            {"token": "t"},
            {"server": "https://api.prod:6443", "certificate-authority-data": 1234},
            "certificate-authority-data must be text, not a number",
        ),
        (
            {"token": "t"},
            {"server": "https://api.prod:6443", "proxy-url": "http://10.0.0.1:3128"},
            "Cluster 'prod' names a proxy-url",
        ),
        (
            {"token": "t"},
            {"server": "https://api.prod:6443", 1: "x"},
            "settings we do not support: 1",
        ),
    ],
    ids=[
        "token-mapping", "token-list", "token-number", "password-mapping", "cert-mapping",
        "extensions-mapping", "tls-server-name-mapping", "server-number", "server-list",
        "skip-verify-text", "ca-number", "proxy-url", "key-not-text",
    ],
)  # fmt: skip
def test_every_value_has_its_type_or_is_refused_naming_the_field(
    user: dict[object, object], cluster: dict[object, object] | None, problem: str
) -> None:
    with pytest.raises(KubeconfigInvalid, match=re.escape(problem)):
        kubeconfig_load(kubeconfig(user, cluster))  # type: ignore[arg-type]


def test_the_context_is_type_checked_too() -> None:
    config = yaml.safe_load(kubeconfig({"token": "t"}))
    config["contexts"][0]["context"]["namespace"] = {"a": 1}
    with pytest.raises(KubeconfigInvalid, match="Context 'prod': namespace must be text"):
        kubeconfig_load(yaml.safe_dump(config))
