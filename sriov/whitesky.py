"""The whitesky client that NIC calls are made with: the account's API, the cluster's
SR-IOV credential.

Never the account's own credential: an SR-IOV configuration without its credential gets no
client at all. The credential goes only to WHITESKY_ALLOWED_HOSTS, like the account's.
"""

from __future__ import annotations

from django.conf import settings

from capvco_web.counters import whitesky_call_count
from capvco_web.integrations import whitesky as ws
from cloud.models import whitesky_allowed_hosts
from sriov.models import SriovConfig


class NoCredential(Exception):
    """The cluster's SR-IOV has no credential of its own."""


def sriov_whitesky_client(config: SriovConfig) -> ws.WhiteskyClient:
    """Raises NoCredential when the operator gave none (nothing falls back to the
    account's)."""
    if not config.credential:
        raise NoCredential(
            f"SR-IOV of cluster {config.cluster.name} has no credential: an admin must give "
            "one (the account's own is never used for NICs)."
        )
    account = config.cluster.account

    def token_store(token: str) -> None:
        SriovConfig.objects.filter(pk=config.pk).update(credential=token)
        config.credential = token

    return ws.WhiteskyClient(
        api_url=account.api_url,
        customer_id=account.customer_id,
        token=config.credential,
        allowed_hosts=whitesky_allowed_hosts(),
        iam_url=account.iam_url or None,
        on_token_refreshed=token_store,
        on_answer=whitesky_call_count,
        proxy_url=settings.WHITESKY_PROXY_URL or None,
        ca_bundle=settings.WHITESKY_CA_BUNDLE or None,
        timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_READ_TIMEOUT),
        long_timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_LONG_READ_TIMEOUT),
    )
