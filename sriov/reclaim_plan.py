"""The NIC detaches of a cluster's reclaim, as steps of the cluster's plan.

`nic_reclaim_plan` reads the database only, what observe mirrored:

* a pod NIC is detached when its pod is gone or finished in the cluster's last pod
  observation, which was complete and began after the NIC was asked for (the pod existed
  then), and has been so for the grace period (`pod_gone_since`, or from now when this
  pass flags it); or when a detach was asked for and did not finish (`detaching`);
* a leaked NIC (`LeakedNic`: a VM's NIC listing, one whole call taken under the VM's
  lock while no attach on the VM was in flight, showed it on the SR-IOV network with no
  pod NIC owning its MAC) is detached after the grace period when the account releases
  orphans by itself, or on the next pass when a person asked for it, while still no
  attach on its VM is in flight.

Each step names the rows and the NIC (VM, MAC, address) and the whitesky calls it makes.
Act (`sriov.reclaim`) makes exactly those, after a compare-and-set check that the rows
are as planned; a step whose rows changed is dropped and planned again next pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from capvco_web.integrations.whitesky import operations as ops
from capvco_web.plans import Call
from clusters.models import Cluster
from kube.models import KubePod
from kube.selectors import cluster_observation
from sriov.models import LeakedNic, PodNic, SriovConfig
from sriov.placement import FINISHED_PHASES

State = PodNic.State
POD_NIC_DETACH = "pod_nic_detach"
LEAKED_NIC_DETACH = "leaked_nic_detach"
KINDS = (POD_NIC_DETACH, LEAKED_NIC_DETACH)


def _nics_path(cloudspace_id: str, vm_id: int) -> str:
    return f"cloudspaces/{cloudspace_id}/vms/{vm_id}/external-nics"


@dataclass(frozen=True)
class PodNicDetach:
    """Detach the NIC of a pod NIC row and mark the row released (audited)."""

    pod_nic_id: int
    pod: str
    """namespace/name"""
    cloudspace_id: str
    vm_id: int
    mac: str
    """Empty: never attached, or an attach whose answer was lost (`finds`)."""
    ip: str
    state: str
    seen_at: datetime
    """The row's `updated_at` as planned: act detaches only while it (and state, MAC) hold."""
    finds: bool
    """No MAC but the attach was sent: act first lists the VM's NICs for the one it made."""
    reason: str

    @property
    def kind(self) -> str:
        return POD_NIC_DETACH

    @property
    def target(self) -> str:
        return f"NIC {self.mac or '(no MAC)'} of pod {self.pod} on VM {self.vm_id}"

    def describe(self) -> str:
        return f"detach {self.target}: {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        path = _nics_path(self.cloudspace_id, self.vm_id)
        if self.mac:
            detach = Call(ops.DETACH_EXTERNAL_NIC.operation_id, f"{path}/{self.ip}")
            return (detach,)
        if self.finds:
            return (
                Call(ops.LIST_VM_NICS.operation_id, path),
                Call(ops.DETACH_EXTERNAL_NIC.operation_id, f"{path}/<the NIC found>"),
            )
        return ()  # nothing was attached: the row is released


@dataclass(frozen=True)
class LeakedNicDetach:
    """Detach a NIC nobody owns and forget its row (audited)."""

    leaked_nic_id: int
    location_id: int
    cloudspace_id: str
    vm_id: int
    network_id: int
    mac: str
    ip: str
    reason: str

    @property
    def kind(self) -> str:
        return LEAKED_NIC_DETACH

    @property
    def target(self) -> str:
        return f"leaked NIC {self.mac} ({self.ip}) on VM {self.vm_id}"

    def describe(self) -> str:
        return f"detach {self.target}: {self.reason}"

    def calls(self) -> tuple[Call, ...]:
        path = _nics_path(self.cloudspace_id, self.vm_id)
        return (Call(ops.DETACH_EXTERNAL_NIC.operation_id, f"{path}/{self.ip}"),)


NicStep = PodNicDetach | LeakedNicDetach


def reclaim_grace() -> timedelta:
    return timedelta(seconds=settings.SRIOV_RECLAIM_GRACE_SECONDS)


def cluster_reclaim_plan(cluster: Cluster) -> list[NicStep]:
    """The cluster plan's part (registered in `sriov.apps`): what a reclaim pass now does."""
    return nic_reclaim_plan(cluster, now=timezone.now(), grace=reclaim_grace())


def nic_reclaim_plan(cluster: Cluster, *, now: datetime, grace: timedelta) -> list[NicStep]:
    # The configuration as read with the cluster, where it was (the dashboard's page).
    config: SriovConfig | None = getattr(cluster, "sriov", None)
    if config is None or not config.credential:
        return []  # nothing is detached without the operator's SR-IOV credential
    steps: list[NicStep] = [*pod_nics_plan(cluster, now=now, grace=grace)]
    steps += leaks_plan(cluster, now=now, grace=grace)
    return steps


def pod_gone_reasons(cluster: Cluster, rows: list[PodNic]) -> dict[int, str]:
    """Why each row's pod counts as gone ("" when it is alive), judged only from the
    cluster's last pod observation when it was complete and began after the row was
    asked for; rows it cannot judge are left out. The rows come from `live_pod_nics`."""
    observation = cluster_observation(cluster)
    listed_at = observation.last_complete_at
    if not observation.complete or listed_at is None:
        return {}
    reasons: dict[int, str] = {}
    for row in rows:
        if row.requested_at > listed_at:
            continue
        phase = getattr(row, "pod_phase", None)
        if phase is None:
            reasons[row.pk] = "its pod is gone"
        elif phase in FINISHED_PHASES:
            reasons[row.pk] = f"its pod finished ({phase})"
        else:
            reasons[row.pk] = ""
    return reasons


def live_pod_nics(cluster: Cluster) -> list[PodNic]:
    """The cluster's pod NICs not released, each with its mirrored pod's phase
    (`pod_phase`, None: no such pod), in one query."""
    phase = KubePod.objects.filter(cluster=cluster, uid=OuterRef("pod_uid")).values("phase")
    return list(
        PodNic.objects.filter(cluster=cluster)
        .select_related("gone")
        .exclude(state=State.RELEASED)
        .annotate(pod_phase=Subquery(phase[:1]))
        .order_by("pk")
    )


def pod_nics_plan(cluster: Cluster, *, now: datetime, grace: timedelta) -> list[PodNicDetach]:
    rows = live_pod_nics(cluster)
    gone = pod_gone_reasons(cluster, rows)
    steps = []
    for row in rows:
        why = gone.get(row.pk, "")
        since = row.pod_gone_since or now  # flagged by this pass, if not yet
        if why and since + grace <= now:
            reason = f"reclaimed: {why}"
        elif row.state == State.DETACHING:
            reason = "detach asked for, tried again"
        else:
            continue
        sent = row.attach_started_at is not None
        steps.append(
            PodNicDetach(
                pod_nic_id=row.pk,
                pod=f"{row.namespace}/{row.pod_name}",
                cloudspace_id=row.cloudspace_id,
                vm_id=row.vm_id,
                mac=row.mac,
                ip=str(row.ip or ""),
                state=row.state,
                seen_at=row.updated_at,
                finds=not row.mac and sent and row.state in (State.ATTACHING, State.FAILED),
                reason=reason,
            )
        )
    return steps


def leaks_plan(cluster: Cluster, *, now: datetime, grace: timedelta) -> list[LeakedNicDetach]:
    # Each with whether an attach on its VM is in flight, in the same query.
    attaching = PodNic.objects.filter(
        location=OuterRef("location"), vm_id=OuterRef("vm_id"), state=State.ATTACHING
    )
    # A person's "detach now" is due at once; the grace period is for the automatic kind.
    due = LeakedNic.objects.filter(cluster=cluster).filter(
        Q(leaked_since__lte=now - grace) | Q(detach_requested_at__isnull=False)
    )
    rows = list(due.exclude(ip=None).annotate(attaching=Exists(attaching)).order_by("pk"))
    if rows and not cluster.account.orphan_auto_release:
        rows = [row for row in rows if row.detach_requested_at is not None]
    return [
        LeakedNicDetach(
            leaked_nic_id=row.pk,
            location_id=row.location_id,
            cloudspace_id=row.cloudspace_id,
            vm_id=row.vm_id,
            network_id=row.network_id,
            mac=row.mac,
            ip=str(row.ip),
            reason=row.detach_reason
            if row.detach_requested_at is not None
            else "leaked NIC past its grace period",
        )
        for row in rows
        if not row.attaching
    ]
