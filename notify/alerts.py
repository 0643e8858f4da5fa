"""What is wrong now, read from the mirrored rows: the alerts a pass opens notices for, and
where the rows are whole enough that an alert missing from them has ended."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from autoscale.models import GpuShortfall
from billing.models import BillCheck, BillItem, IdleSpell
from billing.selectors import bill_checks_latest
from cloud.models import Location
from cloud.selectors import observations
from clusters.models import ClusterSite, Machine
from clusters.orphans import vm_orphans_list
from gpus.selectors import orphans_list
from kube.models import GpuVerification, KubeNode
from kube.selectors import verifications_latest
from notify.models import Reason


@dataclass(frozen=True)
class Alert:
    account_id: int
    reason: Reason
    key: str
    summary: str
    details: dict[str, Any]


@dataclass
class Alerts:
    """The alerts of a pass, and the locations whose listings were whole (`complete`): a
    leak notice of another location stays open, as a partial listing proves nothing gone."""

    found: list[Alert] = field(default_factory=list)
    complete: set[int] = field(default_factory=set)


def alerts_collect(*, now: datetime, account_ids: Iterable[int]) -> Alerts:
    accounts = set(account_ids)
    alerts = Alerts()
    locations = list(Location.objects.filter(account_id__in=accounts).select_related("account"))
    # Orphans are flagged by complete listings only (gpus/mirror.py, clusters/observe.py);
    # a location whose last observation, or one of whose cloudspaces, was partial may still
    # hold what it no longer shows.
    unlisted = set(
        ClusterSite.objects.filter(location__in=locations)
        .exclude(observation_error="")
        .values_list("location_id", flat=True)
    )
    alerts.complete = {
        loc.pk for loc in locations if loc.observation_complete and loc.pk not in unlisted
    }
    for vgpu in orphans_list().filter(location__account_id__in=accounts):
        # ORPHANED reads the listed row's orphaned_since.
        assert vgpu.listed is not None and vgpu.listed.orphaned_since is not None
        since = vgpu.listed.orphaned_since
        details = {
            "location": vgpu.location.name,
            "location_id": vgpu.location_id,
            "vgpu_id": vgpu.vgpu_id,
            "name": vgpu.name,
            "orphaned_since": since.isoformat(),
        }
        key = f"{vgpu.location_id}:{vgpu.vgpu_id}"
        summary = f"vGPU {vgpu.name} ({vgpu.vgpu_id}) in {vgpu.location.name}, owned by no machine"
        alerts.found.append(
            Alert(vgpu.location.account_id, Reason.VGPU_ORPHAN, key, summary, details)
        )
        if since <= now - vgpu.location.account.orphan_grace_period:
            alerts.found.append(
                Alert(
                    vgpu.location.account_id, Reason.VGPU_ORPHAN_PAST_GRACE, key, summary, details
                )
            )
    for vm in vm_orphans_list().filter(location__account_id__in=accounts):
        assert vm.orphaned_since is not None  # the selector filters on it
        details = {
            "location": vm.location.name,
            "location_id": vm.location_id,
            "vm_id": vm.vm_id,
            "name": vm.name,
            "cloudspace_id": vm.cloudspace_id,
            "orphaned_since": vm.orphaned_since.isoformat(),
            "why": vm.orphan_reason,
        }
        key = f"{vm.location_id}:{vm.vm_id}"
        summary = f"VM {vm.name} ({vm.vm_id}) in {vm.location.name}: {vm.orphan_reason}"
        alerts.found.append(Alert(vm.location.account_id, Reason.VM_ORPHAN, key, summary, details))
        if vm.orphaned_since <= now - vm.location.account.orphan_grace_period:
            alerts.found.append(
                Alert(vm.location.account_id, Reason.VM_ORPHAN_PAST_GRACE, key, summary, details)
            )
    failed = Machine.objects.filter(
        phase=Machine.Phase.FAILED, pool__cluster__account_id__in=accounts
    ).select_related("pool__cluster")
    for machine in failed:
        cluster = machine.pool.cluster
        alerts.found.append(
            Alert(
                cluster.account_id,
                Reason.MACHINE_FAILED,
                str(machine.pk),
                f"machine {machine.name} of cluster {cluster.name} failed: "
                f"{machine.failure_message}"[:500],
                {"cluster": cluster.name, "machine": machine.name, "why": machine.failure_message},
            )
        )
    stuck = Machine.objects.filter(
        capacity_stuck_since__isnull=False, pool__cluster__account_id__in=accounts
    ).select_related("pool__cluster", "pool__site__location")
    for machine in stuck:
        assert machine.capacity_wait_since is not None  # set with the flag
        cluster = machine.pool.cluster
        alerts.found.append(
            Alert(
                cluster.account_id,
                Reason.MACHINE_STUCK,
                str(machine.pk),
                f"machine {machine.name} of cluster {cluster.name} is stuck: "
                f"{machine.failure_message}"[:500],
                {
                    "cluster": cluster.name,
                    "machine": machine.name,
                    "location": machine.pool.site.location.name,
                    "waiting_since": machine.capacity_wait_since.isoformat(),
                    "why": machine.failure_message,
                },
            )
        )
    for seen in observations(locations=locations, now=now, interval=settings.OBSERVE_INTERVAL):
        if not seen.stale:
            continue
        last = seen.location.last_complete_observation_at
        alerts.found.append(
            Alert(
                seen.location.account_id,
                Reason.LOCATION_STALE,
                str(seen.location.pk),
                f"location {seen.location.name}: no complete observation since "
                f"{last.isoformat() if last else 'ever'}",
                {
                    "location": seen.location.name,
                    "last_complete_observation_at": last.isoformat() if last else None,
                    "error": seen.location.observation_error,
                },
            )
        )
    idle_since = now - settings.NOTIFY_IDLE_GPU_AFTER
    spells = IdleSpell.objects.filter(
        ended_at__isnull=True, since__lte=idle_since, account_id__in=accounts
    ).select_related("location")
    for spell in spells:
        alerts.found.append(
            Alert(
                spell.account_id,
                Reason.IDLE_GPUS,
                f"{spell.cluster_id}:{spell.machine_id}",
                f"node {spell.node_name} of cluster {spell.cluster_name}: {spell.idle_gpus} "
                f"GPU(s) idle since {spell.since.isoformat()}, {spell.hourly:.2f} "
                f"{spell.currency}/h",
                {
                    "cluster": spell.cluster_name,
                    "node": spell.node_name,
                    "location": spell.location.name,
                    "idle_gpus": spell.idle_gpus,
                    "idle_since": spell.since.isoformat(),
                    "hourly_cost": str(spell.hourly.quantize(Decimal("0.0001"))),
                    "cost_so_far": str(spell.cost(until=now).quantize(Decimal("0.01"))),
                    "currency": spell.currency,
                },
            )
        )
    # Once per node incarnation (its uid): a node verified again, or gone, ends it.
    nodes = verifications_latest(
        KubeNode.objects.filter(
            cluster__account_id__in=accounts, machine__pool__gpu_count__gt=0
        ).select_related("cluster")
    )
    for node in nodes:
        verdict = getattr(node, "verify_status", None)
        if verdict not in (GpuVerification.Status.MISMATCH, GpuVerification.Status.FAILED):
            continue
        reasons = list(getattr(node, "verify_reasons", None) or [])
        alerts.found.append(
            Alert(
                node.cluster.account_id,
                Reason.GPU_NODE_NOT_VERIFIED,
                f"{node.cluster_id}:{node.uid}",
                f"node {node.name} of cluster {node.cluster.name}: GPUs {verdict}: "
                f"{'; '.join(reasons)}"[:500],
                {
                    "cluster": node.cluster.name,
                    "node": node.name,
                    "node_uid": node.uid,
                    "verdict": verdict,
                    "reasons": reasons,
                },
            )
        )
    # Once per cluster and pod shape while the autoscaler finds no pool able to take them.
    shortfalls = GpuShortfall.objects.filter(cluster__account_id__in=accounts).select_related(
        "cluster"
    )
    for shortfall in shortfalls.order_by("pk"):
        cluster = shortfall.cluster
        alerts.found.append(
            Alert(
                cluster.account_id,
                Reason.GPU_NO_CAPACITY,
                f"{cluster.pk}:{shortfall.gpu_type}:{shortfall.gpus}",
                f"cluster {cluster.name}: {shortfall.text}"[:500],
                {
                    "cluster": cluster.name,
                    "gpu_type": shortfall.gpu_type,
                    "gpus": shortfall.gpus,
                    "pods": shortfall.pods,
                    "since": shortfall.since.isoformat(),
                    "why": shortfall.text,
                },
            )
        )
    # A later check of the location with nothing unexplained ends the alert.
    for check in bill_checks_latest(Location.objects.filter(account_id__in=accounts)).values():
        if check.unexplained > 0:
            alerts.found.append(unexplained_bill_alert(check))
    return alerts


# How many of an unexplained bill's objects a notice names (its summary names fewer).
BILL_OBJECTS_TOLD = 20


def unexplained_bill_alert(check: BillCheck) -> Alert:
    """The location's newest checked hour billed money nothing of ours explains."""
    location = check.location
    unexplained = [i for i in check.items.all() if i.verdict == BillItem.Verdict.UNEXPLAINED]
    hour = f"{check.start:%Y-%m-%d %H:%M}\u2013{check.end:%H:%M} UTC"
    amount = f"{check.unexplained.quantize(Decimal('0.0001'))} {check.currency}".strip()
    named = ", ".join(_billed_object(item) for item in unexplained[:3])
    more = f" and {len(unexplained) - 3} more" if len(unexplained) > 3 else ""
    return Alert(
        location.account_id,
        Reason.UNEXPLAINED_BILL,
        str(location.pk),
        f"location {location.name}, {hour}: {amount} billed, not explained: {named}{more}",
        {
            "location": location.name,
            "location_id": location.pk,
            "start": check.start.isoformat(),
            "end": check.end.isoformat(),
            "currency": check.currency,
            "billed": str(check.billed),
            "unexplained": str(check.unexplained),
            "objects": [
                {
                    "kind": item.kind,
                    "id": item.external_id,
                    "name": item.name,
                    "cloudspace_id": item.cloudspace_id,
                    "cost": str(item.cost),
                }
                for item in unexplained[:BILL_OBJECTS_TOLD]
            ],
            "objects_total": len(unexplained),
        },
    )


def _billed_object(item: BillItem) -> str:
    what = "VM" if item.kind == BillItem.Kind.VM else "vGPU"
    named = f"{item.name} ({item.external_id})" if item.name else item.external_id
    return f"{what} {named} {item.cost.quantize(Decimal('0.0001'))}"


# The reasons whose alerts are read from whitesky's listings: missing from a pass, they
# ended only where that location's listings were whole. Machines, locations and bill
# checks are our own rows, always whole (a check is written only from a complete picture).
LISTED = {
    Reason.VGPU_ORPHAN,
    Reason.VGPU_ORPHAN_PAST_GRACE,
    Reason.VM_ORPHAN,
    Reason.VM_ORPHAN_PAST_GRACE,
}
