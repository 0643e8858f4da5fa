"""The Kubernetes client of a cluster, from its stored kubeconfig."""

from __future__ import annotations

from django.conf import settings

from capvco_web.integrations.kube.client import KubeClient
from clusters.models import Cluster


def kube_client(cluster: Cluster) -> KubeClient:
    """Raises KubeconfigInvalid when the stored kubeconfig cannot be used."""
    return KubeClient.from_text(
        cluster.kubeconfig,
        timeout=(settings.KUBE_CONNECT_TIMEOUT, settings.KUBE_READ_TIMEOUT),
        page_size=settings.KUBE_LIST_PAGE_SIZE,
    )
