"""Reading a kubeconfig that a person pasted, before anything is sent with it.

Only the current context is used. A kubeconfig that would make the control plane run a
command (`exec`, `auth-provider`) or read a file of its own (`tokenFile`,
`certificate-authority`, `client-certificate`, `client-key`) is refused: its workers are
shared by every cluster, and what they run or read is not the cluster owner's to choose.
Certificates and keys come inline (`*-data`). A `proxy-url` is refused too: the control
plane connects to the API server itself, and only to one KUBE_ALLOWED_HOSTS allows
(`servers.py`); where a kubeconfig may send its credential is the operator's choice, not
its author's.

Every value the client uses is checked for its type (text, true/false, a list), naming the
field: the official client would send a mapping given as a token as its Python repr, and
fail deep inside a call on a mapping given as a TLS server name. The YAML is bounded as
JSON bodies are (capvco_web.api_input): at most MAX_YAML_DEPTH levels of lists and
mappings, MAX_YAML_NODES values, MAX_KUBECONFIG_CHARS characters, and no aliases.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from .servers import AllowedServers

MAX_KUBECONFIG_CHARS = 1_000_000
MAX_YAML_DEPTH = 32  # as a JSON body's (capvco_web.api_input.MAX_JSON_DEPTH)
MAX_YAML_NODES = 20_000  # a kubeconfig of a hundred contexts has a few thousand

_TEXT, _FLAG, _LIST = "text", "true or false", "a list"
_CONTEXT_KEYS = {"cluster": _TEXT, "user": _TEXT, "namespace": _TEXT, "extensions": _LIST}
_CLUSTER_KEYS = {
    "server": _TEXT, "certificate-authority-data": _TEXT, "insecure-skip-tls-verify": _FLAG,
    "tls-server-name": _TEXT, "disable-compression": _FLAG, "extensions": _LIST,
}  # fmt: skip
_USER_KEYS = {
    "token": _TEXT, "client-certificate-data": _TEXT, "client-key-data": _TEXT,
    "username": _TEXT, "password": _TEXT, "extensions": _LIST,
}  # fmt: skip
_TYPES: dict[str, type | tuple[type, ...]] = {_TEXT: str, _FLAG: bool, _LIST: list}
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
    # `insecure-skip-tls-verify: true`: the server's certificate is not checked.
    insecure: bool = False


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses aliases (a kubeconfig needs none, and aliases can make a
    few bytes of YAML expand into gigabytes), and YAML nested deeper than MAX_YAML_DEPTH
    or of more than MAX_YAML_NODES values (the composer recurses per level, and each value
    costs a Python object), before it has read more of it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            raise KubeconfigInvalid("The kubeconfig uses YAML aliases (*name): write it out.")
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise KubeconfigInvalid(f"The kubeconfig has more than {MAX_YAML_NODES} values.")
        nests = self.check_event(yaml.events.CollectionStartEvent)
        self._depth += nests
        if self._depth > MAX_YAML_DEPTH:
            raise KubeconfigInvalid(
                f"The kubeconfig nests lists and mappings deeper than {MAX_YAML_DEPTH} levels."
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= nests


def kubeconfig_load(text: str) -> Kubeconfig:
    """Read a kubeconfig (YAML or JSON) and keep its current context, cluster and user."""
    if not text.strip():
        raise KubeconfigInvalid("The kubeconfig is empty.")
    if len(text) > MAX_KUBECONFIG_CHARS:
        raise KubeconfigInvalid(f"The kubeconfig is larger than {MAX_KUBECONFIG_CHARS} characters.")
    try:
        data = yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a safe loader
    except RecursionError as exc:  # not expected within MAX_YAML_DEPTH: never a 500
        raise KubeconfigInvalid(
            f"The kubeconfig nests deeper than {MAX_YAML_DEPTH} levels."
        ) from exc
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
    context = context_entry["context"]
    _typed(f"Context '{current}'", context, _CONTEXT_KEYS)
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if not cluster_name or not user_name:
        raise KubeconfigInvalid(f"Context '{current}' does not name both a cluster and a user.")
    cluster_entry = _named(data, "clusters", cluster_name, "cluster")
    user_entry = _named(data, "users", user_name, "user")
    server = _cluster_check(cluster_name, cluster_entry["cluster"])
    _user_check(user_name, user_entry["user"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [{"name": current, "context": context}],
        "clusters": [cluster_entry],
        "users": [user_entry],
    }
    insecure = cluster_entry["cluster"].get("insecure-skip-tls-verify") is True
    return Kubeconfig(config=config, context=current, server=server, insecure=insecure)


def kubeconfig_check(
    text: str, allowed_servers: AllowedServers, *, insecure_allowed: bool = False
) -> Kubeconfig:
    """A kubeconfig about to be stored or used: readable, naming a server that the
    allow-list lets its credential go to, and checking that server's certificate unless
    `insecure_allowed` (the account's admin allowed `insecure-skip-tls-verify`)."""
    loaded = kubeconfig_load(text)
    if refusal := allowed_servers.refusal(loaded.server):
        raise KubeconfigInvalid(f"The kubeconfig's server {loaded.server} is refused: {refusal}.")
    if loaded.insecure and not insecure_allowed:
        raise KubeconfigInvalid(
            "The kubeconfig sets insecure-skip-tls-verify: true, so the API server's "
            f"certificate ({loaded.server}) would not be checked and anyone on the way could "
            "take its credential and act on the cluster's machines: give the server's "
            "certificate-authority-data instead, or have an admin of the account allow "
            "insecure TLS to Kubernetes."
        )
    return loaded


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
    if "proxy-url" in cluster:
        raise KubeconfigInvalid(
            f"Cluster '{name}' names a proxy-url: the control plane connects to the API "
            "server itself (to servers KUBE_ALLOWED_HOSTS allows); remove proxy-url."
        )
    _typed(f"Cluster '{name}'", cluster, _CLUSTER_KEYS)
    if "tls-server-name" in cluster and not cluster["tls-server-name"].strip():
        raise KubeconfigInvalid(f"Cluster '{name}': tls-server-name is empty.")
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
    _typed(f"User '{name}'", user, _USER_KEYS)
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


def _typed(what: str, section: dict[str, Any], kinds: dict[str, str]) -> None:
    """Refuse keys we do not know, and values of the wrong type, naming them."""
    unknown = sorted(str(key) for key in section if key not in kinds)
    if unknown:
        raise KubeconfigInvalid(f"{what} has settings we do not support: {', '.join(unknown)}.")
    for key, kind in kinds.items():
        if key in section and not isinstance(section[key], _TYPES[kind]):
            raise KubeconfigInvalid(f"{what}: {key} must be {kind}, not {_kind_of(section[key])}.")


def _kind_of(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "true or false"
    names = {dict: "a mapping", list: "a list", str: "text", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


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
        base64.b64decode(section[key], validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigInvalid(f"{what}: {key} is not base64.") from None
