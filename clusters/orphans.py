"""Orphaned VMs: VMs named by us that no machine owns. They cost money like a reservation.

Who owns a VM is decided by exact names and ids, not by parsing: a machine owns the VM
whose id it recorded; a VM carrying a machine's VM name while that machine holds another
VM is a stray duplicate; a machine that has not recorded a VM yet may be creating that VM
right now, so that VM is not an orphan. A VM not named by us is not ours to judge (a
bastion in the cluster's cloudspace): never an orphan, never removed without a person, but
shown as soon as a listing has it (`vms_not_ours`), billed like any VM, and removed by an
admin who gives a reason.

Flags change only from a complete listing of the VM's cloudspace, and only observe writes
them: a removal we made is recorded in a row of our own (VmRemovalRequest). This module
reads the database and writes flags; it never calls whitesky (the sweep in
clusters/releases.py does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import model_update, rows_key_share
from cloud.models import Account, Location, VirtualMachine, same_customer_account_ids
from clusters.models import Cluster, ClusterSite, Machine, VmRemovalRequest
from clusters.selectors import pools_by_cluster
from gpus import naming


@dataclass(frozen=True)
class VmOwner:
    """What the database says, now, about the owner of a listed VM."""

    kind: Literal["machine", "creating", "orphan", "foreign"]
    machine: str = ""  # "<cluster>/<machine>" when a machine is concerned
    pool: str = ""
    why: str = ""  # for an orphan: why no machine owns it


class VmOwners:
    """The machines of a location's account, by the VM id they recorded and by VM name,
    and by (cluster, machine) name: what the owner names of VMs and vGPUs point at."""

    def __init__(self, location: Location, *, hold: bool = False) -> None:
        """`hold`: keep the machines from being deleted until the transaction ends, for a
        caller that writes rows naming them (observe's reservations): a delete in flight
        is waited for, and its machine then not seen. Their updates (reconcile) go on."""
        self.pools = pools_by_cluster(location.account_id)
        machines = Machine.objects.filter(pool__cluster__account_id=location.account_id)
        rows = machines.values_list(
            "pk", "pool__cluster__name", "pool__name", "name", "vm_id", "pool__site__location_id"
        )
        self.by_vm_id: dict[int, tuple[str, str]] = {}
        self.by_vm_name: dict[str, tuple[str, str, int | None]] = {}
        self.machine_ids: dict[tuple[str, str], int] = {}
        for pk, cluster, pool, machine, vm_id, location_id in (
            rows_key_share(rows) if hold else rows
        ):
            self.machine_ids[(cluster, machine)] = pk
            owner = f"{cluster}/{machine}"
            if vm_id is not None and location_id == location.pk:
                self.by_vm_id[vm_id] = (owner, pool)
            self.by_vm_name[naming.vm_name(cluster, machine)] = (owner, pool, vm_id)

    def of(self, name: str, vm_id: int) -> VmOwner:
        if vm_id in self.by_vm_id:
            machine, pool = self.by_vm_id[vm_id]
            return VmOwner("machine", machine=machine, pool=pool)
        if name in self.by_vm_name:
            machine, pool, held = self.by_vm_name[name]
            if held is None:
                return VmOwner("creating", machine=machine, pool=pool)
            why = f"machine {machine} holds VM {held}, not this one"
            return VmOwner("orphan", machine=machine, pool=pool, why=why)
        if not name.startswith(naming.PREFIX):
            return VmOwner("foreign")
        # Parsed only to say whose it was. A VM name has no "-gpu-<n>" suffix: read it as
        # the name of that VM's first vGPU, which the parser expects.
        owner = naming.owner_parse(f"{name}-gpu-0", self.pools)
        if owner is not None and owner.cluster:
            machine = f"{owner.cluster}/{owner.machine}"
            return VmOwner("orphan", machine=machine, why=f"machine {machine} does not exist")
        return VmOwner("orphan", why="no cluster of this account carries its name")


def vm_orphans_flag(
    *,
    location: Location,
    cloudspace_id: str,
    vms: Sequence[ws.Vm],
    complete: bool,
    owners: VmOwners | None = None,
    now: datetime | None = None,
) -> int:
    """Flag (or clear) the orphans among the listed VMs of a cloudspace; returns the rows
    written. Call it after the VMs are mirrored. A listing that is not complete changes
    nothing: it cannot show that a machine's VM is missing, nor that a flag still holds.

    An orphan gets `orphaned_since` once and one more confirmation per complete listing,
    up to the account's threshold, so a pass over unchanged data writes nothing.
    """
    if not complete:
        return 0
    now = now or timezone.now()
    threshold = location.account.orphan_confirmations
    owners = owners or VmOwners(location)
    rows = {
        vm.vm_id: vm
        for vm in VirtualMachine.objects.filter(
            location=location, cloudspace_id=cloudspace_id, vm_id__in=[v.vm_id for v in vms]
        )
    }
    writes = 0
    for listed in vms:
        row = rows.get(listed.vm_id)
        if row is None:
            continue  # not mirrored (yet): nothing to flag
        owner = owners.of(listed.name, listed.vm_id)
        if owner.kind == "orphan":
            data = {
                "orphaned_since": row.orphaned_since or now,
                "orphan_confirmations": min(row.orphan_confirmations + 1, threshold),
                "orphan_reason": owner.why[:300],
            }
        else:
            data = {"orphaned_since": None, "orphan_confirmations": 0, "orphan_reason": ""}
        seen = {
            "orphaned_since": row.orphaned_since,
            "orphan_confirmations": row.orphan_confirmations,
        }
        writes += model_update(row, data, expect=seen)
    return writes


def vms_not_ours(vms: QuerySet[VirtualMachine] | None = None) -> QuerySet[VirtualMachine]:
    """The VMs (of `vms`, else all mirrored) made outside the control plane: not named by
    us, and held by no machine of their location. What `VmOwners.of` calls foreign."""
    rows = VirtualMachine.objects.all() if vms is None else vms
    held = Machine.objects.filter(
        vm_id=OuterRef("vm_id"), pool__site__location=OuterRef("location")
    )
    return rows.exclude(name__startswith=naming.PREFIX).exclude(Exists(held))


def vm_removal_undecidable(vm: VirtualMachine, *, asked_at: datetime | None = None) -> str | None:
    """Why no removal of a VM not named by us may be decided now (None: it may): it changed
    since the person asked (`asked_at`), or no complete listing of its cloudspace has begun
    since it last changed (what a person saw may not be what whitesky has)."""
    where = f"VM {vm.name} ({vm.vm_id})"
    if asked_at is not None and vm.changed_at > asked_at:
        return (
            f"{where} changed since its removal was asked for ({vm.status} now): ask again "
            "if it should still go"
        )
    location = vm.location
    started = location.observation_started_at
    partial = (
        ClusterSite.objects.filter(location=location, cloudspace_id=vm.cloudspace_id)
        .exclude(observation_error="")
        .exists()
    )
    if started is None or started <= vm.changed_at or partial:
        return (
            f"{where} was last seen changed at {vm.changed_at:%Y-%m-%d %H:%M:%S} UTC and no "
            f"complete listing of cloudspace {vm.cloudspace_id} has begun since: try again "
            "after the next observation"
        )
    return None


def vm_orphans_list(*, location: Location | None = None) -> QuerySet[VirtualMachine]:
    rows = VirtualMachine.objects.filter(orphaned_since__isnull=False).select_related(
        "location__account"
    )
    if location is not None:
        rows = rows.filter(location=location)
    return rows.order_by("orphaned_since", "name")


def vm_orphans_due(*, location: Location, now: datetime) -> list[VirtualMachine]:
    """The orphan VMs the sweep may remove now without a person: the account allows it,
    the last listing of the VM's cloudspace was whole, the grace period is over, enough
    complete listings saw it, and its name says it is provably ours. A location whose GPU
    listings were partial decides nothing either: the VM may hold vGPUs."""
    account = location.account
    if not (account.orphan_auto_release and location.observation_complete):
        return []
    unlisted = ClusterSite.objects.filter(location=location).exclude(observation_error="")
    rows = (
        vm_orphans_list(location=location)
        .filter(
            orphaned_since__lte=now - account.orphan_grace_period,
            orphan_confirmations__gte=account.orphan_confirmations,
            name__startswith=naming.PREFIX,
        )
        .exclude(cloudspace_id__in=unlisted.values("cloudspace_id"))
        .exclude(Exists(_removals_since_listed(location, OuterRef("vm_id"))))
    )
    foreign = other_accounts_prefixes(account)
    return [vm for vm in rows if not vm.name.startswith(foreign)]


def _removals_since_listed(location: Location, vm_id: int | OuterRef) -> QuerySet[VmRemovalRequest]:
    done = VmRemovalRequest.objects.filter(
        location=location, vm_id=vm_id, done_at__isnull=False, error=""
    )
    since = location.observation_started_at
    return done if since is None else done.filter(done_at__gte=since)


def removed_since_listed(vm: VirtualMachine) -> bool:
    """Whether we removed the VM after its location's last listing began: that listing
    still shows it, and says nothing yet of whether the delete happened."""
    return _removals_since_listed(vm.location, vm.vm_id).exists()


def other_accounts_prefixes(account: Account) -> tuple[str, ...]:
    """Name prefixes of the clusters of our other accounts of the same whitesky customer,
    whose VMs and vGPUs this account's listings show too. A name with our prefix is
    provably ours when it names a cluster of this account or a cluster that exists nowhere
    at the customer (gone); one of another such account's clusters is that account's
    business, not an orphan of ours. Accounts of other customers never appear in these
    listings: their cluster names (which may equal ours) decide nothing here."""
    accounts = same_customer_account_ids(account.customer_id) - {account.pk}
    names = Cluster.objects.filter(account_id__in=accounts).values_list("name", flat=True)
    return tuple(f"{naming.PREFIX}{name}-" for name in names)
