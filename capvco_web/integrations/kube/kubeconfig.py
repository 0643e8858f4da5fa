"""Reading a kubeconfig that a person pasted, before anything is sent with it.

Only the current context is used. A kubeconfig that would make the control plane run a
command (`exec`, `auth-provider`) or read a file of its own (`tokenFile`,
`certificate-authority`, `client-certificate`, `client-key`) is refused: its workers are
shared by every cluster, and what they run or read is not the cluster owner's to choose.
Certificates and keys come inline (`*-data`).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

MAX_KUBECONFIG_CHARS = 1_000_000

_CLUSTER_KEYS = {
    "server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name",
    "proxy-url", "disable-compression", "extensions",
}  # fmt: skip
_USER_KEYS = {
    "token", "client-certificate-data", "client-key-data", "username", "password", "extensions",
}  # fmt: skip
_FILE_KEYS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
    "tokenFile": "token",
}


class KubeconfigInvalid(ValueError):
    """The kubeconfig cannot be used; the message names the problem."""


@dataclass(frozen=True)
class Kubeconfig:
    """The part of a kubeconfig the client uses, as a kubeconfig of its own."""

    config: dict[str, Any]
    context: str
    server: str


class _NoAliasLoader(yaml.SafeLoader):
    """A safe loader that refuses anchors and aliases: a kubeconfig needs none, and
    aliases can make a few bytes of YAML expand into gigabytes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            raise KubeconfigInvalid("The kubeconfig uses YAML aliases (*name): write it out.")
        return super().compose_node(parent, index)


def kubeconfig_load(text: str) -> Kubeconfig:
    """Read a kubeconfig (YAML or JSON) and keep its current context, cluster and user."""
    if not text.strip():
        raise KubeconfigInvalid("The kubeconfig is empty.")
    if len(text) > MAX_KUBECONFIG_CHARS:
        raise KubeconfigInvalid(f"The kubeconfig is larger than {MAX_KUBECONFIG_CHARS} characters.")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise KubeconfigInvalid(f"The kubeconfig is not valid YAML{at}.") from exc
    if not isinstance(data, dict):
        raise KubeconfigInvalid("The kubeconfig is not a mapping (apiVersion, clusters, ...).")
    current = data.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigInvalid("The kubeconfig has no current-context: set the one to use.")
    context_entry = _named(data, "contexts", current, "context")
    context = context_entry.get("context") or {}
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if not cluster_name or not user_name:
        raise KubeconfigInvalid(f"Context '{current}' does not name both a cluster and a user.")
    cluster_entry = _named(data, "clusters", cluster_name, "cluster")
    user_entry = _named(data, "users", user_name, "user")
    server = _cluster_check(cluster_name, cluster_entry.get("cluster") or {})
    _user_check(user_name, user_entry.get("user") or {})
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [{"name": current, "context": context}],
        "clusters": [cluster_entry],
        "users": [user_entry],
    }
    return Kubeconfig(config=config, context=current, server=server)


def _named(data: dict[str, Any], section: str, name: str, what: str) -> dict[str, Any]:
    entries = data.get(section)
    if not isinstance(entries, list):
        raise KubeconfigInvalid(f"The kubeconfig has no {section} list.")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            if not isinstance(entry.get(what), dict):
                raise KubeconfigInvalid(f"The {what} '{name}' is empty.")
            return entry
    raise KubeconfigInvalid(f"The kubeconfig names {what} '{name}' but does not define it.")


def _cluster_check(name: str, cluster: dict[str, Any]) -> str:
    _refuse_files(f"Cluster '{name}'", cluster)
    unknown = set(cluster) - _CLUSTER_KEYS
    if unknown:
        raise KubeconfigInvalid(
            f"Cluster '{name}' has settings we do not support: {', '.join(sorted(unknown))}."
        )
    server = cluster.get("server")
    parts = urlsplit(server) if isinstance(server, str) else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise KubeconfigInvalid(
            f"Cluster '{name}' needs a server URL such as https://api.example.com:6443."
        )
    _base64_check(f"Cluster '{name}'", cluster, "certificate-authority-data")
    return str(server)


def _user_check(name: str, user: dict[str, Any]) -> None:
    if "exec" in user or "auth-provider" in user:
        plugin = "exec" if "exec" in user else "auth-provider"
        raise KubeconfigInvalid(
            f"User '{name}' authenticates with {plugin}, which would run a program on the "
            "control plane's workers: use a token (of a ServiceAccount) or a client "
            "certificate instead."
        )
    _refuse_files(f"User '{name}'", user)
    unknown = {key for key in set(user) - _USER_KEYS}
    if unknown:
        raise KubeconfigInvalid(
            f"User '{name}' has settings we do not support: {', '.join(sorted(unknown))}."
        )
    has_cert, has_key = "client-certificate-data" in user, "client-key-data" in user
    if has_cert != has_key:
        raise KubeconfigInvalid(
            f"User '{name}' needs both client-certificate-data and client-key-data."
        )
    _base64_check(f"User '{name}'", user, "client-certificate-data")
    _base64_check(f"User '{name}'", user, "client-key-data")
    if not (user.get("token") or has_cert or user.get("username")):
        raise KubeconfigInvalid(
            f"User '{name}' has no credential: give a token or a client certificate and key."
        )


def _refuse_files(what: str, section: dict[str, Any]) -> None:
    for key, inline in _FILE_KEYS.items():
        if key in section:
            raise KubeconfigInvalid(
                f"{what} reads a file of the control plane ({key}): paste its content as "
                f"{inline} instead."
            )


def _base64_check(what: str, section: dict[str, Any], key: str) -> None:
    if key not in section:
        return
    try:
        base64.b64decode(str(section[key]), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigInvalid(f"{what}: {key} is not base64.") from None
