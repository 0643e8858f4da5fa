"""Changing clusters and machines on a person's behalf: each change is audited."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from capvco_web.audit import audit_record
from clusters.models import Cluster, Machine


def machine_force_delete(
    *, machine: Machine, actor: User | AnonymousUser | str, reason: str
) -> None:
    """Drop a machine without teardown (like `--force`). Its VM and vGPUs stay behind,
    become orphans, and are reclaimed by name (orphan sweep or cluster deletion)."""
    if not reason.strip():
        raise ValueError("A force delete needs a reason.")
    before = {
        "name": machine.name,
        "pool": machine.pool.name,
        "vm_id": machine.vm_id,
        "phase": machine.phase,
    }
    with transaction.atomic():
        audit_record(
            actor=actor, action="machine.force_delete", obj=machine, reason=reason, before=before
        )
        machine.delete()


def cluster_delete(*, cluster: Cluster, actor: User | AnonymousUser | str, reason: str) -> None:
    """Ask for a cluster's deletion: the reconciler tears it down and releases every
    reservation carrying its prefix; the cluster stays `deleting` until none is listed."""
    if not reason.strip():
        raise ValueError("A cluster deletion needs a reason.")
    updated = Cluster.objects.filter(pk=cluster.pk, state=Cluster.State.ACTIVE).update(
        state=Cluster.State.DELETING
    )
    if updated:
        cluster.state = Cluster.State.DELETING
        audit_record(
            actor=actor,
            action="cluster.delete_requested",
            obj=cluster,
            reason=reason,
            before={"state": Cluster.State.ACTIVE},
            after={"state": Cluster.State.DELETING},
        )
