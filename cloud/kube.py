"""Kubernetes clients from a stored kubeconfig: an account's management cluster (Cluster
API import), or any cluster's."""

from __future__ import annotations

from django.conf import settings

from capvco_web.integrations.kube.client import KubeClient
from capvco_web.validators import kube_allowed_servers
from cloud.models import Account


def management_client(account: Account) -> KubeClient:
    """The client of the account's management cluster (Cluster API import); raises
    KubeconfigInvalid when the stored kubeconfig cannot be used."""
    return kubeconfig_client(account.capi_kubeconfig, account=account)


def kubeconfig_client(kubeconfig: str, *, account: Account) -> KubeClient:
    """Raises KubeconfigInvalid when the kubeconfig cannot be used (its server no longer
    allowed, or it skips TLS verification and `account` no longer allows that, too)."""
    return KubeClient.from_text(
        kubeconfig,
        allowed_servers=kube_allowed_servers(),
        insecure_allowed=account.kube_insecure_tls_allowed,
        timeout=(settings.KUBE_CONNECT_TIMEOUT, settings.KUBE_READ_TIMEOUT),
        page_size=settings.KUBE_LIST_PAGE_SIZE,
    )
