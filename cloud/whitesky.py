"""The whitesky client of an account; a refreshed token is stored (encrypted) at once.

The client sends the credential only to WHITESKY_ALLOWED_HOSTS, whatever the row says: a
row written around the model's validation (a shell, an import, an old row) leaks nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from django.conf import settings

from capvco_web.integrations import whitesky as ws
from cloud.models import Account, whitesky_allowed_hosts
from cloud.reach import whitesky_call_seen


def whitesky_client(account: Account, *, seconds: float | None = None) -> ws.WhiteskyClient:
    """The account's client; with `seconds`, its calls all end within that many seconds
    from now (a pass's time: see WhiteskyClient's `deadline`)."""

    def token_store(token: str) -> None:
        Account.objects.filter(pk=account.pk).update(credential=token)
        account.credential = token

    return account_api_client(
        account,
        token=account.credential,
        token_store=token_store,
        page_size=settings.WHITESKY_VGPU_PAGE_SIZE,
        deadline=None if seconds is None else time.monotonic() + seconds,
    )


def account_api_client(
    account: Account,
    *,
    token: str,
    token_store: Callable[[str], None],
    page_size: int = ws.DEFAULT_PAGE_SIZE,
    deadline: float | None = None,
) -> ws.WhiteskyClient:
    """A client of the account's whitesky API with this credential (the account's own, or
    another that reaches the same customer, such as a cluster's SR-IOV credential)."""
    return ws.WhiteskyClient(
        api_url=account.api_url,
        customer_id=account.customer_id,
        token=token,
        allowed_hosts=whitesky_allowed_hosts(),
        iam_url=account.iam_url or None,
        on_token_refreshed=token_store,
        on_answer=partial(whitesky_call_seen, account.pk),
        proxy_url=settings.WHITESKY_PROXY_URL or None,
        ca_bundle=settings.WHITESKY_CA_BUNDLE or None,
        timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_READ_TIMEOUT),
        long_timeout=(settings.WHITESKY_CONNECT_TIMEOUT, settings.WHITESKY_LONG_READ_TIMEOUT),
        page_size=page_size,
        deadline=deadline,
    )
