"""Two of everything a list shows, apart in every way a filter can tell (account, location,
cluster, site, pool, machine, state, flags, names), and a value per filter that picks one
side: what tests/test_api_filters.py and tests/dashboard/test_list_filters.py walk every
list with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Model
from django.utils import timezone

from billing.models import IdleSpell, Leak
from capvco_web.filters import NAME_SUFFIX
from capvco_web.integrations.kube import GPU_TYPE_LABEL
from capvco_web.models import AuditEvent
from cloud.models import Cloudspace, Image, Location, VirtualMachine
from clusters.models import Cluster, Machine
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from kube.models import KubeNode, KubePod
from sriov.models import LeakedNic, PodNic
from tests.factories import (
    AccountFactory,
    AuditEventFactory,
    ClusterFactory,
    ClusterSiteFactory,
    ExternalNetworkFactory,
    GpuProfileFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    MembershipFactory,
    PodNicFactory,
    UserFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
)


@dataclass
class Side:
    """One of the two: its related objects by the filter name that picks them."""

    related: dict[str, Model]
    rows: dict[str, Model] = field(default_factory=dict)


def _side(tag: str, first: bool) -> Side:
    account = AccountFactory(name=f"account-{tag}")
    location = LocationFactory(account=account, name=f"location-{tag}")
    cluster = ClusterFactory(
        account=account,
        name=f"cluster-{tag}",
        state=Cluster.State.ACTIVE if first else Cluster.State.DELETING,
    )
    site = ClusterSiteFactory(cluster=cluster, location=location)
    pool = MachinePoolFactory(site=site, cluster=cluster, name=f"pool-{tag}")
    machine = MachineFactory(
        pool=pool,
        name=f"machine-{tag}",
        vm_id=3000 if first else 3001,
        phase=Machine.Phase.RUNNING if first else Machine.Phase.FAILED,
    )
    now = timezone.now()
    node = KubeNodeFactory(
        cluster=cluster,
        machine=machine,
        name=f"node-{tag}",
        labels={GPU_TYPE_LABEL: f"gpu-{tag}"},
        ready=first,
        gpus_missing=first,
        unowned_since=now if first else None,
    )
    pod = KubePodFactory(
        cluster=cluster,
        namespace=f"ns-{tag}",
        node_name=node.name,
        phase=KubePod.Phase.RUNNING if first else KubePod.Phase.PENDING,
    )
    KubePodFactory(  # asks for a GPU and is on no node: the pending GPU pods' list
        cluster=cluster,
        namespace=f"ns-{tag}",
        name=f"train-{tag}",
        node_name="",
        phase=KubePod.Phase.PENDING,
        gpu_requests=1,
    )
    card = GpuProfileFactory(
        location=location, vendor="NVIDIA" if first else "AMD", model=f"Card {tag}"
    )
    if first:
        reservation = VgpuReservationFactory(
            machine=machine, gpu_id=card.profile_id, vm_id=machine.vm_id
        )
    else:  # not ours, orphaned, on no VM
        reservation = VgpuReservationFactory(
            orphaned=True, location=location, name=f"foreign-{tag}", gpu_id=card.profile_id
        )
    nic = PodNicFactory(
        cluster=cluster,
        location=location,
        machine=machine if first else None,
        namespace=f"ns-{tag}",
        node_name=node.name,
        vm_id=7000 if first else 7001,
        state=PodNic.State.ATTACHED if first else PodNic.State.FAILED,
    )
    PodNicFactory(  # in its VM's queue
        cluster=cluster, location=location, vm_id=nic.vm_id, state=PodNic.State.REQUESTED
    )
    leaked = LeakedNic.objects.create(
        cluster=cluster,
        location=location,
        cloudspace_id="cs-0",
        vm_id=nic.vm_id,
        network_id=900,
        mac=f"52:54:00:00:00:0{int(first)}",
        leaked_since=now,
    )
    MembershipFactory(account=account, user=UserFactory(username=f"member-{tag}"))
    Cloudspace.objects.create(location=location, cloudspace_id=f"cs-{tag}", name=tag, status="OK")
    VirtualMachineFactory(  # one of ours that no machine owns, one a machine's
        location=location,
        cloudspace_id=f"cs-{tag}",
        name=f"capvco-gone-{tag}" if first else machine.vm_name,
        orphaned_since=now if first else None,
    )
    if first:  # made outside the control plane
        VirtualMachineFactory(location=location, cloudspace_id=f"cs-{tag}", name=f"bastion-{tag}")
    Image.objects.create(location=location, image_id=1 if first else 2, name=tag, status="OK")
    ExternalNetworkFactory(location=location)
    event = AuditEventFactory(
        account=account,
        actor_name=f"actor-{tag}",
        action=f"action-{tag}.done",
        object_type=f"type.{tag}",
        object_id=tag,
        object_repr=f"object-{tag}",
    )
    Leak.objects.create(  # the first side's open, the second's ended
        account=account, location=location, kind=Leak.Kind.VGPU if first else Leak.Kind.VM,
        external_id=f"leak-{tag}", name=f"capvco-leaked-{tag}", currency="EUR",
        monthly_price=730, billed_since=now, leaked_since=now,
        ended_at=None if first else now, end="" if first else Leak.End.GONE,
    )  # fmt: skip
    IdleSpell.objects.create(  # the first side's idle now, the second's ended
        account=account, location=location, cluster_id=cluster.pk, cluster_name=cluster.name,
        pool_id=pool.pk, machine_id=machine.pk, node_name=node.name, currency="EUR",
        idle_gpus=1, hourly=1, since=now, ended_at=None if first else now,
    )  # fmt: skip
    # The first side's event is a day older: `since` picks the second, `until` the first.
    when = now - timedelta(days=1 if first else 0)
    AuditEvent.objects.filter(pk=event.pk).update(created_at=when)
    event.refresh_from_db()
    related: dict[str, Model] = {
        "account": account,
        "location": location,
        "cluster": cluster,
        "site": site,
        "pool": pool,
        "machine": machine,
    }
    rows: dict[str, Model] = {
        "reservation": reservation,
        "node": node,
        "pod": pod,
        "card": card,
        "nic": nic,
        "leaked": leaked,
        "event": event,
    }
    return Side(related, rows)


@dataclass
class World:
    first: Side
    second: Side


def two_of_everything() -> World:
    return World(_side("a", True), _side("b", False))


Value = Callable[[World], Any]

# What each filter that is not a related object takes to pick one side, by the model of
# its list. A filter missing here fails the walk: a new one gets a value.
VALUES: dict[tuple[type[Model], str], Value] = {
    (Location, "name"): lambda w: "location-a",
    (Cluster, "state"): lambda w: Cluster.State.ACTIVE,
    (Cluster, "failed"): lambda w: "true",
    (Machine, "phase"): lambda w: Machine.Phase.RUNNING,
    (KubeNode, "ready"): lambda w: "true",
    (KubeNode, "unowned"): lambda w: "true",
    (KubeNode, "gpus_missing"): lambda w: "true",
    (KubeNode, "gpu_type"): lambda w: "gpu-a",
    (KubeNode, "flag"): lambda w: "gpus-missing",
    (KubePod, "namespace"): lambda w: "ns-a",
    (KubePod, "node_name"): lambda w: "node-a",
    (KubePod, "phase"): lambda w: KubePod.Phase.RUNNING,
    (GpuProfile, "vendor"): lambda w: "NVIDIA",
    (VirtualMachine, "cloudspace_id"): lambda w: "cs-a",
    (VirtualMachine, "orphaned"): lambda w: "true",
    (VirtualMachine, "vm_id"): lambda w: VirtualMachine.objects.get(name="bastion-a").vm_id,
    (VirtualMachine, "not_ours"): lambda w: "true",
    (VgpuReservation, "state"): lambda w: VgpuReservation.State.ATTACHED,
    (VgpuReservation, "orphaned"): lambda w: "false",
    (VgpuReservation, "type"): lambda w: gpu_type_of(w.first.rows["card"]),  # type: ignore[arg-type]
    (VgpuReservation, "unassigned"): lambda w: "false",
    (VgpuReservation, "not_ours"): lambda w: "false",
    (VgpuReservation, "vm_id"): lambda w: w.first.rows["reservation"].vm_id,  # type: ignore[attr-defined]
    (VgpuReservation, "q"): lambda w: w.first.rows["reservation"].name,  # type: ignore[attr-defined]
    (PodNic, "state"): lambda w: PodNic.State.ATTACHED,
    (PodNic, "node_name"): lambda w: "node-a",
    (PodNic, "namespace"): lambda w: "ns-a",
    (PodNic, "vm_id"): lambda w: 7000,
    (LeakedNic, "vm_id"): lambda w: 7000,
    (Leak, "kind"): lambda w: Leak.Kind.VGPU,
    (Leak, "open"): lambda w: "true",
    (Leak, "end"): lambda w: Leak.End.GONE,
    (Leak, "q"): lambda w: "leaked-a",
    (IdleSpell, "open"): lambda w: "true",
    (IdleSpell, "cluster_id"): lambda w: w.first.related["cluster"].pk,
    (IdleSpell, "pool_id"): lambda w: w.first.related["pool"].pk,
    (IdleSpell, "machine_id"): lambda w: w.first.related["machine"].pk,
    (AuditEvent, "actor"): lambda w: "actor-a",
    (AuditEvent, "action"): lambda w: "action-a.",
    (AuditEvent, "object_type"): lambda w: "type.a",
    (AuditEvent, "object_id"): lambda w: "a",
    (AuditEvent, "object"): lambda w: "object-a",
    (AuditEvent, "since"): lambda w: w.second.rows["event"].created_at.isoformat(),  # type: ignore[attr-defined]
    (AuditEvent, "until"): lambda w: w.second.rows["event"].created_at.isoformat(),  # type: ignore[attr-defined]
}


def value_for(world: World, model: type[Model], name: str) -> Any:
    """The value of filter `name` of a list of `model` that picks one side: a related
    object's id or name by the convention, else VALUES."""
    relation = name.removesuffix(NAME_SUFFIX)
    if relation in world.first.related:
        related = world.first.related[relation]
        return related.name if name.endswith(NAME_SUFFIX) else related.pk  # type: ignore[attr-defined]
    key = next((k for k in VALUES if k[1] == name and issubclass(model, k[0])), None)
    assert key is not None, f"no value in tests/filter_world.py VALUES for {model.__name__}.{name}"
    return VALUES[key](world)
