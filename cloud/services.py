"""Changing accounts and memberships on a person's behalf: each change is allowed by the
person's role in the account (capvco_web.permissions), validated as the model validates,
and audited (the fields set or changed, never the value of a secret).

What every app's services share lives here too: creating and changing a row
(`row_create`, `row_update`) and the refusal of a delete while something hangs from the
row (`InUse`). Deleting an account needs its clusters and reservations to be gone: that
is the clusters' services' (clusters.services.account_delete).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import ProtectedError

from capvco_web.audit import SystemActor, audit_changes, audit_record, audit_snapshot
from capvco_web.permissions import perm_name, permission_require, permissions_forget
from capvco_web.tasks import send_by_name_on_commit
from cloud.models import Account, Membership

Actor = User | AnonymousUser | SystemActor
M = TypeVar("M", bound=models.Model)
# A caller's own refusal of a row, raised before it is written (an imported cluster's).
Check = Callable[[Any], None]

# Started by name (capvco_web.tasks.send_by_name_on_commit): the task is the clusters'
# (it observes the account's locations and their GPUs), above this app.
OBSERVE_ACCOUNT = "clusters.tasks.observe_account"


class InUse(ProtectedError):
    """A delete refused because something still hangs from the object. The message names
    what is in the way and what to do; the API answers 409 with it, the admin shows it.

    A `ProtectedError`, so that every entry point that handles a foreign key's PROTECT
    handles this refusal the same way.
    """

    def __init__(self, message: str, in_the_way: Iterable[models.Model] = ()) -> None:
        super().__init__(message, set(in_the_way))
        self.message = message

    def __str__(self) -> str:
        return self.message


def listed(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


def counted(names: Sequence[str], noun: str) -> str:
    """`2 machines (gpu-0, gpu-1)`."""
    plural = noun if len(names) == 1 else f"{noun}s"
    return f"{len(names)} {plural} ({listed(names)})"


def them(names: Sequence[str]) -> str:
    return "it" if len(names) == 1 else "them"


def row_create(
    obj: M, *, actor: Actor, action: str, reason: str = "", check: Check | None = None
) -> M:
    """Check the role in the account the new row goes into (and `check`, the caller's own
    refusal, after it), validate, save, audit."""
    permission_require(actor, perm_name(type(obj), "add"), obj)
    if check is not None:
        check(obj)
    obj.full_clean()
    with transaction.atomic():
        obj.save()
        audit_record(actor=actor, action=action, obj=obj, reason=reason, after=audit_snapshot(obj))
    return obj


def row_update(
    obj: M, *, actor: Actor, action: str, reason: str = "", check: Check | None = None
) -> M:
    """Save the changes made to `obj` (a saved row, changed in memory): the role must allow
    the change in the account the row is in, and in the one it would go to; `check` (the
    caller's own refusal) sees the stored row when something changes. Audited with what
    changed; nothing changed writes nothing."""
    perm = perm_name(type(obj), "change")
    with transaction.atomic():
        stored = type(obj)._default_manager.select_for_update().get(pk=obj.pk)
        permission_require(actor, perm, stored)
        permission_require(actor, perm, obj)
        obj.full_clean()
        before, after = audit_changes(stored, obj)
        if not after:
            return obj
        if check is not None:
            check(stored)  # a save that changes nothing is no change
        obj.save()
        audit_record(actor=actor, action=action, obj=obj, reason=reason, before=before, after=after)
    return obj


ACCOUNT_URLS = ("api_url", "iam_url")
_ACCOUNT_CHANGEABLE = frozenset(
    {
        "name",
        "api_url",
        "iam_url",
        "customer_id",
        "credential",
        "orphan_auto_release",
        "orphan_grace_period",
        "orphan_confirmations",
        "kube_insecure_tls_allowed",
    }
)


def account_update_check(*, account: Account, changes: Mapping[str, Any]) -> None:
    """Raise `ValidationError` (on `credential`) when a change moves the API or IAM URL and
    does not give the credential with it: whoever may edit an account must not be able to
    send the JWT stored in it to an address of their choosing, allowed host or not."""
    moved = [f for f in ACCOUNT_URLS if f in changes and changes[f] != getattr(account, f)]
    if moved and not changes.get("credential"):
        # A conflict with the stored URLs (409): the same change keeping them needs none.
        raise ValidationError(
            {
                "credential": ValidationError(
                    "Give the credential again to change the API or IAM URL: the stored one "
                    "is never sent to a new address.",
                    code="conflict",
                )
            }
        )


def account_update(*, account: Account, changes: Mapping[str, Any], actor: Actor) -> Account:
    """Change an account's fields (`credential` replaces the JWT), validated as the model
    validates, and audit what changed: before and after of each field, and of the
    credential only that it changed. `account` is refreshed, and answered."""
    unknown = set(changes) - _ACCOUNT_CHANGEABLE
    if unknown:
        raise ValueError(f"not fields of an account that can be changed: {sorted(unknown)}")
    with transaction.atomic():
        stored = Account.objects.select_for_update().get(pk=account.pk)
        permission_require(actor, perm_name(Account, "change"), stored)
        account_update_check(account=stored, changes=changes)
        changed = copy.copy(stored)
        for field, value in changes.items():
            setattr(changed, field, value)
        before, after = audit_changes(stored, changed)
        if not after:
            return account
        changed.full_clean()
        changed.save()
        audit_record(actor=actor, action="account.update", obj=changed, before=before, after=after)
    account.refresh_from_db()
    return account


def account_create(*, account: Account, actor: Actor) -> Account:
    """Create an account (Django's global permission `cloud.add_account`: no role in
    an account that does not exist yet grants it). The person who creates it becomes its
    admin, so that they see it. The account is observed as soon as it is committed."""
    permission_require(actor, "cloud.add_account")
    account.full_clean()
    with transaction.atomic():
        account.save()
        audit_record(
            actor=actor, action="account.create", obj=account, after=audit_snapshot(account)
        )
        # Observed at once, not at the next beat tick: its locations, cards, cloudspaces
        # and images are there to choose from when its first cluster is set up.
        send_by_name_on_commit(OBSERVE_ACCOUNT, account.pk, True)
        if isinstance(actor, User) and not actor.is_superuser:
            membership_create(
                membership=Membership(
                    user=actor, account=account, role=Group.objects.get(name="admin")
                ),
                actor=SystemActor.ACCOUNT_CREATE,
            )
            permissions_forget(actor)  # what they may do next in this request includes it
    return account


def membership_create(*, membership: Membership, actor: Actor) -> Membership:
    """Give a user a role in an account."""
    return row_create(membership, actor=actor, action="membership.create")


def membership_update(*, membership: Membership, actor: Actor) -> Membership:
    """Change a member's role (or move the membership to another account the actor
    administers)."""
    return row_update(membership, actor=actor, action="membership.update")


def membership_delete(*, membership: Membership, actor: Actor, reason: str = "") -> None:
    """Take a user's role in an account away."""
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update()
            .select_related("user", "account", "role")
            .get(pk=membership.pk)
        )
        permission_require(actor, "cloud.delete_membership", membership)
        audit_record(
            actor=actor,
            action="membership.delete",
            obj=membership,
            reason=reason,
            before=audit_snapshot(membership),
        )
        membership.delete()
