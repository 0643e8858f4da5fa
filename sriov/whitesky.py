"""The whitesky client that NIC calls are made with: the account's API, the cluster's
SR-IOV credential.

Never the account's own credential: an SR-IOV configuration without its credential gets no
client at all. The credential goes only to WHITESKY_ALLOWED_HOSTS, like the account's.
"""

from __future__ import annotations

from capvco_web.integrations import whitesky as ws
from cloud.whitesky import account_api_client
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

    return account_api_client(account, token=config.credential, token_store=token_store)
