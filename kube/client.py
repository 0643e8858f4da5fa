"""The Kubernetes client of a cluster, from the kubeconfig stored for it."""

from __future__ import annotations

import hashlib
import threading

from django.conf import settings

from capvco_web.integrations.kube.client import KubeClient
from cloud.kube import kubeconfig_client
from clusters.models import Cluster


def kube_client(cluster: Cluster) -> KubeClient:
    """Raises KubeconfigInvalid when the stored kubeconfig cannot be used (its server
    no longer allowed, or insecure TLS the account no longer allows, too)."""
    return kubeconfig_client(cluster.kubeconfig, account=cluster.account)


class _SharedClients:
    """One client per cluster for this process's requests, with what it was made from (a
    digest: the kubeconfig is a secret, kept nowhere else)."""

    def __init__(self) -> None:
        self._clients: dict[int, tuple[str, KubeClient]] = {}
        self._lock = threading.Lock()

    def get(self, cluster: Cluster) -> KubeClient:
        made_from = _made_from(cluster)
        with self._lock:
            held = self._clients.get(cluster.pk)
        if held is not None and held[0] == made_from:
            return held[1]
        client = kube_client(cluster)
        with self._lock:
            # A client replaced is not closed: a request may still be using it; its
            # connections close when it is collected.
            self._clients[cluster.pk] = (made_from, client)
        return client

    def clear(self) -> None:
        with self._lock:
            self._clients = {}


def _made_from(cluster: Cluster) -> str:
    """A digest of everything the cluster's client is made from."""
    parts = (
        cluster.kubeconfig,
        cluster.account.kube_insecure_tls_allowed,
        settings.KUBE_ALLOWED_HOSTS,
        settings.KUBE_CONNECT_TIMEOUT,
        settings.KUBE_READ_TIMEOUT,
        settings.KUBE_LIST_PAGE_SIZE,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


shared_clients = _SharedClients()


def kube_client_shared(cluster: Cluster) -> KubeClient:
    """The cluster's client kept by this process, whose connections (and their TLS
    sessions) stay open from one request to the next: made on first use and made again
    whenever what it is made from changed (the kubeconfig, the account's TLS rule, the
    allowed servers), so a changed credential is never used stale. Shared by the
    process's threads: its users never close it. Raises KubeconfigInvalid as kube_client."""
    return shared_clients.get(cluster)
