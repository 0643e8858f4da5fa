"""Reclaim: NICs whose pod is gone or finished, and NICs that nobody owns.

A pass observes, plans, then acts:

* observe: flag pod NICs whose pod is gone or Succeeded/Failed in the cluster's last pod
  observation, when it was complete and began after the NIC was asked for
  (`GonePod`, since when; forgotten when the pod shows again); mirror the external networks and
  their free addresses; list the NICs of each of the cluster's VMs under the VM's lock,
  while no attach on it is under way, and record those on the SR-IOV network that no pod
  NIC owns (`LeakedNic`, audited), forgetting those the listing no longer shows;
* plan (`sriov.reclaim_plan`, the database only, also shown by the cluster's dry run):
  pod NICs flagged for SRIOV_RECLAIM_GRACE_SECONDS, detaches that did not finish, leaks
  past the grace period when the account releases orphans by itself
  (`Account.orphan_auto_release`), and at once those a person asked to detach;
* act: each step exactly, while its rows are as planned (compare-and-set), audited.

A partial pod observation flags nothing and releases nothing: a pod missing from part of
a listing may well be alive. Every whitesky call is made with the cluster's SR-IOV
credential.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.plans import (
    PassRecord,
    PlanStep,
    StepDropped,
    StepFailed,
    Stopwatch,
    plan_apply,
)
from cloud.models import Location
from clusters.models import Cluster, Machine
from kube.selectors import cluster_observation
from sriov.agent import Clients, Refused, nic_release, vm_lock_name
from sriov.models import ExternalNetwork, GonePod, LeakedNic, PodNic, SriovConfig
from sriov.networks import external_networks_mirror, network_match
from sriov.reclaim_plan import (
    LeakedNicDetach,
    NicStep,
    PodNicDetach,
    live_pod_nics,
    nic_reclaim_plan,
    pod_gone_reasons,
    reclaim_grace,
)

logger = logging.getLogger(__name__)

RECLAIMER = SystemActor.SRIOV_RECLAIM
State = PodNic.State
# The reclaimer waits only briefly for a VM's turn: a busy VM is taken up next pass.
TURN_WAIT = 2.0


@dataclass
class ReclaimResult:
    cluster: str
    pods_complete: bool
    flagged: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    leaks_detached: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """Steps whose rows changed since they were planned: the next pass plans again."""
    errors: list[str] = field(default_factory=list)


def cluster_nics_reclaim(
    *,
    cluster: Cluster,
    clients: Clients | None = None,
    now: datetime | None = None,
    grace: timedelta | None = None,
) -> ReclaimResult:
    clients = clients or Clients()
    now = now or timezone.now()
    grace = reclaim_grace() if grace is None else grace
    cluster.refresh_from_db()
    pods_complete = cluster_observation(cluster).complete
    result = ReclaimResult(cluster=cluster.name, pods_complete=pods_complete)
    config = SriovConfig.objects.select_related("cluster__account").filter(cluster=cluster).first()
    if config is None or not config.credential:
        return result
    _pod_nics_flag(cluster, now, result)
    try:
        with clients.whitesky(config) as client:
            _networks_observe(cluster, config, client, result)
            _leaks_observe(cluster, config, client, now, result)
            watch = Stopwatch()
            steps = nic_reclaim_plan(cluster, now=now, grace=grace)
            nic_plan_apply(
                cluster=cluster, steps=steps, clients=clients, client=client, result=result,
                plan_ms=watch.lap(),
            )  # fmt: skip
    except ws.WhiteskyError as exc:
        result.errors.append(str(exc))
    for problem in result.errors:
        logger.warning("sriov reclaim of %s: %s", cluster.name, problem)
    return result


def nic_plan_apply(
    *,
    cluster: Cluster,
    steps: list[NicStep],
    clients: Clients,
    client: ws.WhiteskyClient,
    result: ReclaimResult,
    plan_ms: int = 0,
) -> PassRecord:
    """Carry out exactly these steps through the dispatcher, each only while its rows are
    as planned; the pass is recorded when it planned anything."""

    def act(step: PlanStep) -> None:
        if isinstance(step, PodNicDetach):
            _pod_nic_detach(step, clients, result)
        else:
            assert isinstance(step, LeakedNicDetach)
            _leaked_nic_detach(step, client, result)

    record = plan_apply(steps, act, scope="nics", scope_id=cluster.pk, plan_ms=plan_ms)
    if steps:
        record.save()
    for step, outcome in zip(steps, record.outcomes, strict=True):
        if outcome.outcome == "dropped":
            result.dropped.append(step.describe())
        elif outcome.outcome != "ran":
            result.errors.append(outcome.message)
    return record


def _pod_nics_flag(cluster: Cluster, now: datetime, result: ReclaimResult) -> None:
    """Record the pods the last complete observation shows gone (GonePod, since now when
    new), and forget those it shows alive again and those no live NIC is left of. Writes
    only GonePod: the NIC rows are the agent's and the reclaim act's."""
    rows = live_pod_nics(cluster)
    gone = pod_gone_reasons(cluster, rows)
    known = set(GonePod.objects.filter(cluster=cluster).values_list("pod_uid", flat=True))
    new: dict[str, PodNic] = {}
    alive: set[str] = set()
    for row in rows:
        if row.pk not in gone:
            continue  # not judged by that observation
        if gone[row.pk]:
            if row.pod_uid not in known:
                new.setdefault(row.pod_uid, row)
        else:
            alive.add(row.pod_uid)
    GonePod.objects.bulk_create(
        [GonePod(cluster=cluster, pod_uid=uid, since=now) for uid in new], ignore_conflicts=True
    )
    result.flagged.extend(str(row) for row in new.values())
    forgotten = (known & alive) | (known - {row.pod_uid for row in rows})
    if forgotten:
        GonePod.objects.filter(cluster=cluster, pod_uid__in=forgotten).delete()


def _pod_nic_detach(step: PodNicDetach, clients: Clients, result: ReclaimResult) -> None:
    row = PodNic.objects.filter(
        pk=step.pod_nic_id, state=step.state, mac=step.mac, updated_at=step.seen_at
    ).first()
    if row is None:
        raise StepDropped("its row changed since the plan")
    try:
        nic_release(row=row, clients=clients, wait=TURN_WAIT, actor=RECLAIMER, reason=step.reason)
    except Refused as exc:
        raise StepFailed(f"{row}: {exc.message}") from exc
    result.released.append(str(row))


def _networks_observe(
    cluster: Cluster, config: SriovConfig, client: ws.WhiteskyClient, result: ReclaimResult
) -> None:
    """Mirror the external networks of the cluster's locations, and count the free
    addresses of the SR-IOV network in each."""
    for location in Location.objects.filter(sites__cluster=cluster).distinct():
        try:
            networks = external_networks_mirror(client=client, location=location)
            network = network_match(networks, config.external_network)
            if network is None:
                continue  # no SR-IOV here: an ADD on a VM of this location says so
            free = len(
                client.list_free_ips(location=location.name, external_network_id=network.network_id)
            )
        except ws.WhiteskyError as exc:
            result.errors.append(f"networks of {location.name}: {exc}")
            continue
        if network.free_addresses != free:
            ExternalNetwork.objects.filter(pk=network.pk).update(free_addresses=free)


def _leaks_observe(
    cluster: Cluster,
    config: SriovConfig,
    client: ws.WhiteskyClient,
    now: datetime,
    result: ReclaimResult,
) -> None:
    machines = (
        Machine.objects.filter(pool__cluster=cluster, vm_id__isnull=False)
        .select_related("pool__site__location")
        .order_by("pk")
    )
    networks: dict[int, ExternalNetwork | None] = {}
    for machine in machines:
        site = machine.pool.site
        location = site.location
        if location.pk not in networks:
            networks[location.pk] = network_match(
                list(ExternalNetwork.objects.filter(location=location)), config.external_network
            )
        network = networks[location.pk]
        vm_id = machine.vm_id
        if network is None or vm_id is None:
            continue
        with object_lock(vm_lock_name(location.pk, vm_id)) as taken:
            if not taken:
                continue  # an attach or detach is under way: next pass
            try:
                _vm_leaks(
                    cluster, client, location, site.cloudspace_id, vm_id, network, now, result
                )
            except ws.WhiteskyError as exc:
                result.errors.append(f"NICs of VM {vm_id}: {exc}")


def _vm_leaks(
    cluster: Cluster,
    client: ws.WhiteskyClient,
    location: Location,
    cloudspace_id: str,
    vm_id: int,
    network: ExternalNetwork,
    now: datetime,
    result: ReclaimResult,
) -> None:
    live = PodNic.objects.filter(location=location, vm_id=vm_id).exclude(state=State.RELEASED)
    if live.filter(state=State.ATTACHING).exists():
        return  # an attach whose answer was lost owns a NIC it has not named yet
    owned = set(live.exclude(mac="").values_list("mac", flat=True))
    nics = client.list_vm_nics(cloudspace_id=cloudspace_id, vm_id=vm_id)
    unowned = {
        nic.mac.lower(): nic
        for nic in nics
        if nic.network_id == network.network_id and nic.mac.lower() not in owned
    }
    known = {row.mac: row for row in LeakedNic.objects.filter(location=location, vm_id=vm_id)}
    gone = [row.pk for mac, row in known.items() if mac not in unowned]
    if gone:
        LeakedNic.objects.filter(pk__in=gone).delete()
    for mac, nic in unowned.items():
        if mac in known:
            continue
        row = LeakedNic.objects.create(
            cluster=cluster,
            location=location,
            cloudspace_id=cloudspace_id,
            vm_id=vm_id,
            network_id=network.network_id,
            mac=mac,
            ip=nic.ip or None,
            leaked_since=now,
        )
        result.leaked.append(str(row))
        audit_record(
            actor=RECLAIMER,
            action="sriov.nic_leak_flag",
            obj=row,
            after={"mac": mac, "ip": nic.ip, "vm_id": vm_id},
        )


def _leaked_nic_detach(
    step: LeakedNicDetach, client: ws.WhiteskyClient, result: ReclaimResult
) -> None:
    with object_lock(vm_lock_name(step.location_id, step.vm_id)) as taken:
        row = (
            LeakedNic.objects.select_related("detach_requested_by")
            .filter(pk=step.leaked_nic_id, mac=step.mac, ip=step.ip)
            .first()
            if taken
            else None
        )
        # Still nobody's: no pod NIC names its MAC, and no attach on the VM is in flight
        # (its NIC is not named yet), as when the listing found it.
        claimed = (
            PodNic.objects.filter(location_id=step.location_id)
            .exclude(state=State.RELEASED)
            .filter(Q(vm_id=step.vm_id, state=State.ATTACHING) | Q(mac=step.mac))
            .exists()
        )
        if row is None or claimed:
            raise StepDropped("its row changed or a pod NIC claims it since the plan")
        try:
            client.detach_external_nic(
                cloudspace_id=step.cloudspace_id,
                vm_id=step.vm_id,
                ip=step.ip,
                external_network_id=step.network_id,
            )
        except ws.NotFound:
            pass  # gone already
        except ws.WhiteskyError as exc:
            LeakedNic.objects.filter(pk=row.pk).update(failure=str(exc)[:1000])
            raise StepFailed(f"leaked NIC {row}: {exc}") from exc
        by_person = row.detach_requested_at is not None
        with transaction.atomic():
            audit_record(
                actor=row.detach_requested_by if row.detach_requested_by else RECLAIMER,
                action="sriov.leaked_nic_detach",
                obj=row,
                reason=step.reason if by_person else "leaked NIC past its grace period",
                before={"mac": row.mac, "ip": row.ip, "vm_id": row.vm_id},
            )
            row.delete()
    result.leaks_detached.append(step.mac)
