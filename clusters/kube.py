"""The Kubernetes client of a cluster, or of an account's management cluster, from the
kubeconfig stored for it."""

from __future__ import annotations

from django.conf import settings

from capvco_web.integrations.kube.client import KubeClient
from capvco_web.validators import kube_allowed_servers
from clusters.models import Account, Cluster


def kube_client(cluster: Cluster) -> KubeClient:
    """Raises KubeconfigInvalid when the stored kubeconfig cannot be used (its server
    no longer allowed, too)."""
    return _client(cluster.kubeconfig)


def management_client(account: Account) -> KubeClient:
    """The client of the account's management cluster (Cluster API import); raises
    KubeconfigInvalid when the stored kubeconfig cannot be used."""
    return _client(account.capi_kubeconfig)


def _client(kubeconfig: str) -> KubeClient:
    return KubeClient.from_text(
        kubeconfig,
        allowed_servers=kube_allowed_servers(),
        timeout=(settings.KUBE_CONNECT_TIMEOUT, settings.KUBE_READ_TIMEOUT),
        page_size=settings.KUBE_LIST_PAGE_SIZE,
    )
