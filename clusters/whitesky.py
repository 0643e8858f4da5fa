"""The whitesky client of an account; a refreshed token is stored (encrypted) at once."""

from __future__ import annotations

from django.conf import settings

from capvco_web.counters import whitesky_call_count
from capvco_web.integrations import whitesky as ws
from clusters.models import Account


def whitesky_client(account: Account) -> ws.WhiteskyClient:
    def token_store(token: str) -> None:
        Account.objects.filter(pk=account.pk).update(credential=token)
        account.credential = token

    return ws.WhiteskyClient(
        api_url=account.api_url,
        customer_id=account.customer_id,
        token=account.credential,
        iam_url=account.iam_url or None,
        on_token_refreshed=token_store,
        on_answer=whitesky_call_count,
        page_size=settings.WHITESKY_VGPU_PAGE_SIZE,
        timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_READ_TIMEOUT),
        long_timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_LONG_READ_TIMEOUT),
    )
