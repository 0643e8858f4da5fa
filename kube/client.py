"""The Kubernetes client of a cluster, from the kubeconfig stored for it."""

from __future__ import annotations

from capvco_web.integrations.kube.client import KubeClient
from cloud.kube import kubeconfig_client
from clusters.models import Cluster


def kube_client(cluster: Cluster) -> KubeClient:
    """Raises KubeconfigInvalid when the stored kubeconfig cannot be used (its server
    no longer allowed, or insecure TLS the account no longer allows, too)."""
    return kubeconfig_client(cluster.kubeconfig, account=cluster.account)
