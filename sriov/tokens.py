"""Agent tokens: the key a cluster's CNI plugin calls the agent API with.

`cvsriov_<key_id>_<secret>`: the row keeps `key_id`, which finds it, and a SHA-256 of the
whole token, compared in constant time (as API tokens, capvco_web/tokens.py). A token is
shown once, when it is made; rotating makes a new one and retires the others, at once or
after an overlap that lets the nodes take the new one first.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from capvco_web.audit import audit_record
from capvco_web.permissions import Actor, permission_require
from capvco_web.tokens import LAST_USED_RESOLUTION, token_hash
from clusters.models import Cluster
from sriov.models import AGENT_TOKEN_PREFIX, AgentToken

KEY_ID_BYTES = 6
SECRET_BYTES = 32
MAX_OVERLAP = timedelta(days=1)
_NO_HASH = "0" * 64


class AgentTokenRefused(Exception):
    """Why a presented agent token does not authenticate; the message is for the caller."""


def agent_token_rotate(
    *, cluster: Cluster, actor: Actor, overlap: timedelta = timedelta(0), reason: str = ""
) -> tuple[AgentToken, str]:
    """Make the cluster's new agent token (returned once, never again) and retire the
    others: at once, or `overlap` from now (at most a day). Needs the admin role. Audited."""
    permission_require(actor, "sriov.change_sriovconfig", cluster)
    if not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise ValueError("The overlap is from 0 to 1 day.")
    key_id = secrets.token_hex(KEY_ID_BYTES)
    raw = f"{AGENT_TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
    now = timezone.now()
    with transaction.atomic():
        others = AgentToken.objects.filter(cluster=cluster)
        retired = list(others.values_list("key_id", flat=True))
        if overlap:
            ends = now + overlap
            others.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=ends)).update(
                expires_at=ends
            )
        else:
            others.delete()
        token = AgentToken.objects.create(
            cluster=cluster, key_id=key_id, token_hash=token_hash(raw)
        )
        audit_record(
            actor=actor,
            action="sriov.agent_token_rotate",
            obj=cluster,
            reason=reason,
            before={"tokens": [f"{AGENT_TOKEN_PREFIX}{k}" for k in retired]},
            after={
                "token": f"{AGENT_TOKEN_PREFIX}{key_id}",
                "others_end": (now + overlap).isoformat() if retired else None,
            },
        )
    return token, raw


def agent_token_authenticate(raw: str) -> AgentToken:
    """The live agent token `raw` is, its cluster loaded; raises AgentTokenRefused."""
    prefix, _, rest = raw.partition(AGENT_TOKEN_PREFIX)
    key_id, _, secret = rest.partition("_")
    if prefix or not key_id or not secret:
        raise AgentTokenRefused(
            f"Not an agent token: they look like {AGENT_TOKEN_PREFIX}<id>_<secret>."
        )
    token = AgentToken.objects.select_related("cluster__account").filter(key_id=key_id).first()
    matches = hmac.compare_digest(token.token_hash if token else _NO_HASH, token_hash(raw))
    if token is None or not matches:
        raise AgentTokenRefused("Invalid agent token (rotated away, or never made).")
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise AgentTokenRefused("Agent token retired: install the cluster's new one.")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
