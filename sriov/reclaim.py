"""Reclaim: NICs whose pod is gone or finished, and NICs that nobody owns.

A pod NIC is flagged (`pod_gone_since`) when the cluster's last pod observation was
complete, began after the NIC was asked for, and shows its pod gone or Succeeded/Failed;
the flag clears when the pod shows again. After SRIOV_RECLAIM_GRACE_SECONDS it is
detached and released (audited). A partial observation flags nothing and releases
nothing: a pod missing from part of a listing may well be alive.

A NIC on the SR-IOV network of one of the cluster's VMs that no live pod NIC owns is a
leak (`LeakedNic`, from that VM's NIC listing, taken while no attach on the VM is under
way). After the grace period it is detached when the account releases orphans by itself
(`Account.orphan_auto_release`), or when a person asked for it; otherwise it waits.

Every whitesky call is made with the cluster's SR-IOV credential.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from cloud.models import Location
from clusters.models import Cluster, KubePod, Machine
from sriov.agent import Clients, Refused, nic_release, vm_lock_name
from sriov.models import ExternalNetwork, LeakedNic, PodNic, SriovConfig
from sriov.networks import external_networks_mirror, network_match
from sriov.placement import FINISHED_PHASES

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
    grace = timedelta(seconds=settings.SRIOV_RECLAIM_GRACE_SECONDS) if grace is None else grace
    cluster.refresh_from_db()
    result = ReclaimResult(cluster=cluster.name, pods_complete=cluster.kube_observation_complete)
    config = SriovConfig.objects.select_related("cluster__account").filter(cluster=cluster).first()
    if config is None or not config.credential:
        return result
    _pod_nics_reclaim(cluster, clients, now, grace, result)
    try:
        with clients.whitesky(config) as client:
            _networks_observe(cluster, config, client, result)
            _leaks_reclaim(cluster, config, client, now, grace, result)
    except ws.WhiteskyError as exc:
        result.errors.append(str(exc))
    for problem in result.errors:
        logger.warning("sriov reclaim of %s: %s", cluster.name, problem)
    return result


def _pod_nics_reclaim(
    cluster: Cluster, clients: Clients, now: datetime, grace: timedelta, result: ReclaimResult
) -> None:
    rows = list(PodNic.objects.filter(cluster=cluster).exclude(state=State.RELEASED))
    listed_at = cluster.kube_last_complete_observation_at
    judged = cluster.kube_observation_complete and listed_at is not None
    pods = {
        uid: phase
        for uid, phase in KubePod.objects.filter(
            cluster=cluster, uid__in=[row.pod_uid for row in rows]
        ).values_list("uid", "phase")
    }
    for row in rows:
        asked_to_go = row.state == State.DETACHING
        gone_reason = ""
        if judged and listed_at is not None and row.requested_at <= listed_at:
            phase = pods.get(row.pod_uid)
            if phase is None:
                gone_reason = "its pod is gone"
            elif phase in FINISHED_PHASES:
                gone_reason = f"its pod finished ({phase})"
        if gone_reason and row.pod_gone_since is None:
            PodNic.objects.filter(pk=row.pk).update(pod_gone_since=now)
            row.pod_gone_since = now
            result.flagged.append(str(row))
        elif not gone_reason and judged and row.pod_gone_since is not None:
            PodNic.objects.filter(pk=row.pk).update(pod_gone_since=None)
            row.pod_gone_since = None
        due = (
            bool(gone_reason)
            and row.pod_gone_since is not None
            and row.pod_gone_since + grace <= now
        )
        if not (due or asked_to_go):
            continue
        reason = f"reclaimed: {gone_reason}" if due else "detach asked for, tried again"
        try:
            nic_release(row=row, clients=clients, wait=TURN_WAIT, actor=RECLAIMER, reason=reason)
        except Refused as exc:
            result.errors.append(f"{row}: {exc.message}")
            continue
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


def _leaks_reclaim(
    cluster: Cluster,
    config: SriovConfig,
    client: ws.WhiteskyClient,
    now: datetime,
    grace: timedelta,
    result: ReclaimResult,
) -> None:
    machines = (
        Machine.objects.filter(pool__cluster=cluster, vm_id__isnull=False)
        .select_related("pool__site__location")
        .order_by("pk")
    )
    networks: dict[int, ExternalNetwork | None] = {}
    auto = cluster.account.orphan_auto_release
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
                    cluster, client, location, site.cloudspace_id, vm_id, network, now, grace, auto,
                    result,
                )  # fmt: skip
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
    grace: timedelta,
    auto: bool,
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
        row = known.get(mac)
        if row is None:
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
        due = row.leaked_since + grace <= now
        if not (due and (auto or row.detach_requested_at is not None)):
            continue
        _leak_detach(client, row, nic, result)


def _leak_detach(
    client: ws.WhiteskyClient, row: LeakedNic, nic: ws.VmNic, result: ReclaimResult
) -> None:
    try:
        client.detach_external_nic(
            cloudspace_id=row.cloudspace_id,
            vm_id=row.vm_id,
            ip=nic.ip,
            external_network_id=row.network_id,
        )
    except ws.NotFound:
        pass  # gone already
    except ws.WhiteskyError as exc:
        LeakedNic.objects.filter(pk=row.pk).update(failure=str(exc)[:1000])
        result.errors.append(f"leaked NIC {row}: {exc}")
        return
    by_person = row.detach_requested_at is not None
    with transaction.atomic():
        audit_record(
            actor=row.detach_requested_by if row.detach_requested_by else RECLAIMER,
            action="sriov.leaked_nic_detach",
            obj=row,
            reason=row.detach_reason if by_person else "leaked NIC past its grace period",
            before={"mac": row.mac, "ip": row.ip, "vm_id": row.vm_id},
        )
        row.delete()
    result.leaks_detached.append(nic.mac)
