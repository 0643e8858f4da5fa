"""Agent tokens: the keys of the agent API.

`cvsriov_<key_id>_<secret>`: the row keeps `key_id`, which finds it, and a SHA-256 of the
whole token, compared in constant time (as API tokens, capvco_web/tokens.py). A token is
shown once, when it is made.

* The cluster's **enrollment** token is what an admin makes (and rotates): the node
  DaemonSet's Secret carries it, and it does one thing, enrolling a node.
* A **node** token is what the installer on a node gets for it by enrolling, bound to
  the cluster and the node's name: the CNI plugin calls with it, for pods on that node
  only. A node that holds a live token enrolls again only by presenting it (so another
  node, which can read the same Secret, cannot take its name); an admin revokes a node's
  tokens to let a new machine take the name.

Rotating the enrollment token retires the others (at once, or after an overlap that lets
the nodes take the new Secret first); each node's installer, seeing the new Secret,
enrolls again with its current node token and gets a new one.

A web process keeps the tokens it authenticated for AGENT_TOKEN_CACHE_SECONDS, so an ADD
and its polls cost no lookup: a token revoked or rotated away is refused at once by the
process that did it, and by every other (and a token gone with its machine, by all)
within that time. Its expiry is checked on every call.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.permissions import Actor, permission_require
from capvco_web.tokens import LAST_USED_RESOLUTION, token_hash
from clusters.models import Cluster, Machine
from sriov.models import AGENT_TOKEN_PREFIX, AgentToken
from sriov.placement import KubeClientFactory, Refused, node_placement, shared_kube

KEY_ID_BYTES = 6
SECRET_BYTES = 32
MAX_OVERLAP = timedelta(days=1)
# A node's replaced token keeps working this long: calls under way finish, and an
# installer whose enrollment answer was lost can enroll again with it.
NODE_TOKEN_OVERLAP = timedelta(minutes=2)
INSTALLER = SystemActor.SRIOV_INSTALLER  # the actor of an enrollment
_NO_HASH = "0" * 64
AGENT_TOKEN_CACHE_SECONDS = 5.0


class _TokenCache:
    """The agent tokens this process authenticated lately, by key id, with when each was
    read (`clock`); shared by the process's threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tokens: dict[str, tuple[float, AgentToken]] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str) -> AgentToken | None:
        with self._lock:
            found = self._tokens.get(key_id)
        if found is None or self.clock() - found[0] >= AGENT_TOKEN_CACHE_SECONDS:
            return None
        return found[1]

    def put(self, token: AgentToken) -> None:
        with self._lock:
            now = self.clock()
            self._tokens = {
                k: v for k, v in self._tokens.items() if now - v[0] < AGENT_TOKEN_CACHE_SECONDS
            }
            self._tokens[token.key_id] = (now, token)

    def clear(self) -> None:
        with self._lock:
            self._tokens = {}


_cache = _TokenCache()


def agent_tokens_forget() -> None:
    """Read every agent token from the database again at its next use (this process): after
    a change of tokens, which other processes see within AGENT_TOKEN_CACHE_SECONDS."""
    _cache.clear()


class AgentTokenRefused(Exception):
    """Why a presented agent token does not authenticate; the message is for the caller."""


class NodeEnrolled(Refused):
    """The node holds a live token and the enrollment did not present it."""

    status = 409
    code = "node_enrolled"


def _token_new() -> tuple[str, str]:
    key_id = secrets.token_hex(KEY_ID_BYTES)
    return key_id, f"{AGENT_TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"


def _live() -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())


def agent_token_rotate(
    *, cluster: Cluster, actor: Actor, overlap: timedelta = timedelta(0), reason: str = ""
) -> tuple[AgentToken, str]:
    """Make the cluster's new enrollment token (returned once, never again) and retire
    the other enrollment tokens: at once, or `overlap` from now (at most a day). Node
    tokens stay: each node's installer exchanges its own once it has the new Secret.
    Needs the admin role. Audited."""
    permission_require(actor, "sriov.change_sriovconfig", cluster)
    if not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise ValueError("The overlap is from 0 to 1 day.")
    key_id, raw = _token_new()
    now = timezone.now()
    with transaction.atomic():
        others = AgentToken.objects.filter(cluster=cluster, node_name="")
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
    agent_tokens_forget()
    return token, raw


def node_token_enroll(
    *,
    enrollment: AgentToken,
    node_name: str,
    current_token: str = "",
    address: str | None = None,
    kube_client: KubeClientFactory | None = None,
) -> tuple[AgentToken, str]:
    """Exchange the cluster's enrollment token for a token bound to its node `node_name`
    and its machine (returned once). Only for a node of the cluster that is one of its
    machines (the mirror, else its Kubernetes API). When the node's machine holds a live
    token, `current_token` must be one of them: it is then replaced (kept
    NODE_TOKEN_OVERLAP longer); otherwise NodeEnrolled. Tokens of an earlier machine of
    the same node name are deleted. Audited, with the caller's address."""
    if enrollment.node_name:
        raise ValueError("Only the cluster's enrollment token enrolls a node.")
    # Read now: the enrollment token may be a cached one (its cluster as it was then).
    cluster = Cluster.objects.select_related("account").get(pk=enrollment.cluster_id)
    machine = node_placement(
        cluster=cluster, node_name=node_name, kube_client=kube_client or shared_kube(cluster)
    ).machine
    key_id, raw = _token_new()
    now = timezone.now()
    refused = NodeEnrolled(
        f"Node {node_name} has enrolled already: enrolling it again needs its current token. "
        "If the node was replaced, an admin revokes its tokens first."
    )
    try:
        with transaction.atomic():
            # One enrollment of a machine at a time: the next sees the token this one made.
            if not list(Machine.objects.select_for_update().filter(pk=machine.pk).values("pk")):
                raise Refused(f"Node {node_name}'s machine is gone.")
            tokens = AgentToken.objects.select_for_update().filter(
                cluster=cluster, node_name=node_name
            )
            live = list(tokens.filter(_live(), machine=machine).order_by("pk"))
            presented = token_hash(current_token) if current_token else _NO_HASH
            if live and not any(hmac.compare_digest(t.token_hash, presented) for t in live):
                raise refused
            # Expired ones, and those of another machine that had the node's name before.
            stale = tokens.exclude(pk__in=[t.pk for t in live])
            gone = list(stale.values_list("key_id", flat=True))
            stale.delete()
            ends = now + NODE_TOKEN_OVERLAP
            AgentToken.objects.filter(pk__in=[t.pk for t in live]).filter(
                Q(expires_at__isnull=True) | Q(expires_at__gt=ends)
            ).update(expires_at=ends)
            token = AgentToken.objects.create(
                cluster=cluster,
                node_name=node_name,
                machine=machine,
                enrolled_from=address,
                key_id=key_id,
                token_hash=token_hash(raw),
            )
            audit_record(
                actor=INSTALLER,
                action="sriov.node_token_enroll",
                obj=cluster,
                before={
                    "tokens": [f"{AGENT_TOKEN_PREFIX}{t.key_id}" for t in live],
                    "deleted": [f"{AGENT_TOKEN_PREFIX}{k}" for k in gone],
                },
                after={
                    "token": f"{AGENT_TOKEN_PREFIX}{key_id}",
                    "node": node_name,
                    "machine": machine.name,
                    "address": address,
                    "enrollment_token": f"{AGENT_TOKEN_PREFIX}{enrollment.key_id}",
                },
            )
    except IntegrityError:
        raise refused from None  # another enrollment of the node made its token first
    agent_tokens_forget()
    return token, raw


def node_token_revoke(*, cluster: Cluster, node_name: str, actor: Actor, reason: str) -> int:
    """Delete every token of the cluster's node `node_name` (they answer 401 from now on);
    how many. The name may then enroll again without one (a new machine of it, or the
    node itself, which can read the Secret): to keep a node out, remove its machine.
    Needs the admin role. Audited."""
    permission_require(actor, "sriov.change_sriovconfig", cluster)
    if not node_name:
        raise ValueError("Name the node whose tokens are revoked.")
    with transaction.atomic():
        tokens = AgentToken.objects.filter(cluster=cluster, node_name=node_name)
        revoked = list(tokens.values_list("key_id", flat=True))
        tokens.delete()
        audit_record(
            actor=actor,
            action="sriov.node_token_revoke",
            obj=cluster,
            reason=reason,
            before={"node": node_name, "tokens": [f"{AGENT_TOKEN_PREFIX}{k}" for k in revoked]},
            after={"tokens": []},
        )
    agent_tokens_forget()
    return len(revoked)


def agent_token_authenticate(raw: str) -> AgentToken:
    """The live agent token `raw` is (either kind), its cluster loaded (as it was when the
    token was read: at most AGENT_TOKEN_CACHE_SECONDS ago); raises AgentTokenRefused."""
    prefix, _, rest = raw.partition(AGENT_TOKEN_PREFIX)
    key_id, _, secret = rest.partition("_")
    if prefix or not key_id or not secret:
        raise AgentTokenRefused(
            f"Not an agent token: they look like {AGENT_TOKEN_PREFIX}<id>_<secret>."
        )
    token = _cache.get(key_id)
    if token is None:
        token = AgentToken.objects.select_related("cluster__account").filter(key_id=key_id).first()
        if token is not None:
            _cache.put(token)
    matches = hmac.compare_digest(token.token_hash if token else _NO_HASH, token_hash(raw))
    if token is None or not matches:
        raise AgentTokenRefused("Invalid agent token (rotated away, revoked, or never made).")
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise AgentTokenRefused(
            "Agent token retired: the node's installer enrolls again with the new one."
            if token.node_name
            else "Agent token retired: install the cluster's new one."
        )
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
